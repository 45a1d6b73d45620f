"""The package's plan is its import graph (docs/ARCHITECTURE.md): the run config is the
foundation every stage builds on, so it imports no stage, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import anchorviz

PACKAGE = Path(anchorviz.__file__).parent

# the modules the run config may import: the option lists and the file helpers (no stage)
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

