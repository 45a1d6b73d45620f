"""The package's plan is its import graph (docs/ARCHITECTURE.md): the run config is the
foundation every stage builds on, so it imports no stage, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import anchorviz

PACKAGE = Path(anchorviz.__file__).parent

# the modules the run config may import: the option lists, the file helpers and the
# arithmetic choice (leaves: no stage)
CONFIG_MAY_IMPORT = {"anchorviz.choices", "anchorviz.paths",
                     "anchorviz.precision"}  # what bf16: auto resolves to (itself a leaf)


def internal_imports(path: Path) -> list[tuple[str, bool]]:
    """``(module, inside a function)`` for every ``anchorviz`` import in ``path``."""
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name, in_function) for a in child.names
                           if a.name.split(".")[0] == "anchorviz")
            elif isinstance(child, ast.ImportFrom) and (child.module or "").split(".")[0] \
                    == "anchorviz":
                out.append((child.module, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text()), False)
    return out


def test_config_is_a_leaf_importing_no_stage():
    for name in ("config.py", "choices.py", "precision.py"):
        found = {m for m, _ in internal_imports(PACKAGE / name)}
        allowed = CONFIG_MAY_IMPORT if name == "config.py" else set()
        assert found <= allowed, (name, sorted(found - allowed))



# In-function imports of the package's own modules: only where a module must not load a heavy
# library at import (the CLI's --help, the figures that read stored runs without torch, the
# stage checks `import anchorviz` registers). Each says why in a comment before it.
MAX_IN_FUNCTION_IMPORTS = 40


def _in_function_imports() -> list[tuple[Path, int, int, list[str]]]:
    """``(file, its def line, the import's line, the file's lines)`` of each internal import
    inside a function."""
    out = []

    def visit(node: ast.AST, fn: ast.AST | None, path: Path, lines: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if fn is not None and isinstance(child, (ast.Import, ast.ImportFrom)):
                mods = ([a.name for a in child.names] if isinstance(child, ast.Import)
                        else [child.module or ""])
                if any(m.split(".")[0] == "anchorviz" for m in mods):
                    out.append((path, fn.lineno, child.lineno, lines))
            is_fn = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, child if is_fn else fn, path, lines)

    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        visit(ast.parse(text), None, path, text.splitlines())
    return out


def test_internal_imports_sit_at_module_top_unless_a_comment_says_why():
    found = _in_function_imports()
    assert len(found) <= MAX_IN_FUNCTION_IMPORTS, len(found)
    for path, def_line, line, lines in found:
        between = lines[def_line - 1:line]
        assert any(x.lstrip().startswith("#") or "  # " in x for x in between), \
            f"{path.relative_to(PACKAGE.parent)}:{line}: an in-function import without a reason"


def test_every_top_level_name_resolves_to_its_home():
    """Each name of ``anchorviz.__all__`` loads, is the object its home module holds, and is
    defined there (functions and classes), so `_HOMES` names the one place it lives."""
    import importlib

    assert anchorviz.__all__ == ["__version__", *anchorviz._PUBLIC]
    assert len(anchorviz.__all__) == len(set(anchorviz.__all__))
    for name, home in anchorviz._PUBLIC.items():
        value = getattr(anchorviz, name)
        assert value is getattr(importlib.import_module(home), name), name
        if callable(value) and hasattr(value, "__module__"):
            assert value.__module__ == home, (name, value.__module__, home)


def test_the_type_checking_block_lists_the_same_names_as_homes():
    """Editors and type checkers read the TYPE_CHECKING imports; `__getattr__` reads `_HOMES`:
    the two name the same names in the same modules."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "TYPE_CHECKING")
    seen = {(node.module, a.name) for node in block.body if isinstance(node, ast.ImportFrom)
            for a in node.names}
    assert seen == {(home, name) for name, home in anchorviz._PUBLIC.items()}


def test_the_example_configs_list_every_choice_of_a_listed_setting():
    """A ``key: value  # a | b | c`` comment in configs/*.yaml lists the setting's choices as
    `anchorviz.choices` (or the trackers of `anchorviz.training.tracking`) has them, all of
    them: the comments cannot fall behind the code."""
    import re

    from anchorviz import choices
    from anchorviz.training.tracking import BACKENDS

    lists = {"artifact_kind": ("none", *choices.ARTIFACT_KINDS),
             "artifact_target_mode": choices.TARGET_MODES, "name": choices.METHODS,
             "anchor_layers": choices.LAYER_NAMES, "reference": choices.REFERENCES,
             "report_to": BACKENDS, "projection": choices.PROJECTIONS,
             "pooling": choices.POOLINGS, "group_key": choices.GROUP_KEYS}
    seen = 0
    for path in sorted((PACKAGE.parent / "configs").glob("*.yaml")):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*#?\s*(\w+):[^#]*#\s*([^#]*\|[^#]*)", line)
            if not m or m.group(1) not in lists:
                continue
            words = [w.strip(" \"'") for w in re.split(r"[|:]", m.group(2))]
            named = {w.split()[0] for w in words if w and not w[0].isdigit()}
            assert set(lists[m.group(1)]) <= named, (path.name, line, lists[m.group(1)])
            seen += 1
    assert seen >= 5


def _import_table():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "import_table", PACKAGE.parent / "scripts" / "import_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_architecture_holds_the_import_table_of_the_code():
    """docs/ARCHITECTURE.md's table of which part imports which is the code's, regenerated by
    ``python scripts/import_table.py``."""
    doc = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text()
    block = doc.split("<!-- imports:begin -->\n", 1)[1].split("\n<!-- imports:end -->", 1)[0]
    assert block == _import_table().table(), "run python scripts/import_table.py"


def test_no_part_imports_a_later_one():
    """The plan is layered: leaves, the run config, the sweep config, stages 1-6, the command
    line; a part imports only parts above it (inside functions too)."""
    mod = _import_table()
    for part, (top, lazy) in mod.part_imports().items():
        later = {p for p in top | lazy if mod.ORDER.index(p) > mod.ORDER.index(part)}
        assert not later, (part, later)


def test_no_module_imports_a_private_name_of_another():
    """A name another module needs is public in its home (no ``from x import _name``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("anchorviz"):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found
