"""The package's plan, read from its imports: which parts of ``anchorviz`` each part imports.

A part is a stage folder (``data``, ``models``, ``training``, ``analysis``, ``pipeline``,
``viz``) or a top-level module (``choices``, ``paths``, ``precision``, ``config``,
``sweep_config``, ``cli``); the package root (``__init__.py``: the entry point that loads every
name on first use) is left out. ``python scripts/import_table.py`` prints the markdown table
that docs/ARCHITECTURE.md holds between its ``imports:begin`` / ``imports:end`` markers;
tests/test_import_plan.py checks the two agree and that no part imports a later one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "anchorviz"

#: the parts in the order of the plan: each may import only parts above it
LAYERS = [("leaves", ["choices", "paths", "precision"]), ("run config", ["config"]),
          ("sweep config", ["sweep_config"]), ("stage 1", ["data"]), ("stage 2", ["models"]),
          ("stage 3", ["training"]), ("stage 4", ["analysis"]), ("stage 5", ["pipeline"]),
          ("stage 6", ["viz"]), ("command line", ["cli"])]
ORDER = [part for _, parts in LAYERS for part in parts]


def _part(module: str) -> str | None:
    bits = module.split(".")
    return bits[1] if len(bits) > 1 and bits[0] == "anchorviz" else None


def part_imports() -> dict[str, tuple[set[str], set[str]]]:
    """``{part: (parts imported at module top, parts imported only inside functions)}``."""
    out: dict[str, tuple[set[str], set[str]]] = {p: (set(), set()) for p in ORDER}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("").parts
        if rel == ("__init__",):
            continue
        src = rel[0]
        top, lazy = out[src]

        def visit(node: ast.AST, in_function: bool, src: str = src, top=top, lazy=lazy) -> None:
            for child in ast.iter_child_nodes(node):
                names = []
                if isinstance(child, ast.ImportFrom) and child.module == "anchorviz":
                    names = [f"anchorviz.{a.name}" for a in child.names]  # a part by name
                elif isinstance(child, ast.ImportFrom) and child.module:
                    names = [child.module]
                elif isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                for name in names:
                    part = _part(name)
                    if part in ORDER and part != src:
                        (lazy if in_function else top).add(part)
                visit(child, in_function or isinstance(child, (ast.FunctionDef,
                                                               ast.AsyncFunctionDef)))

        visit(ast.parse(path.read_text()), False)
    return {p: (top, lazy - top) for p, (top, lazy) in out.items()}


def table() -> str:
    """The markdown table of `part_imports`, in the order of `LAYERS`."""
    found = part_imports()
    rows = ["| layer | part | imports at module top | only inside functions |",
            "|---|---|---|---|"]
    for layer, parts in LAYERS:
        for part in parts:
            top, lazy = found[part]
            rows.append(f"| {layer} | `{part}` | {', '.join(sorted(top, key=ORDER.index)) or '-'}"
                        f" | {', '.join(sorted(lazy, key=ORDER.index)) or '-'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
