"""No god objects (issue 42): no module over 900 lines, no class over 300, no function over 120.

The one exception is named here with the size it has now, so it cannot grow: the argparse
table of the command line (one ``add_argument`` per flag: a table, split by nothing but its
sub-commands). A new exception needs a reason here."""

from __future__ import annotations

import ast
from pathlib import Path

import anchorviz

PACKAGE = Path(anchorviz.__file__).parent
MAX_MODULE, MAX_CLASS, MAX_FUNCTION = 900, 300, 120

EXCEPTIONS = {
    # the command line's argparse table: one add_argument per flag and sub-command
    "cli.py:build_parser": 200,
}


def _sizes() -> dict[str, tuple[str, int]]:
    """``{"path" or "path:name": (kind, lines)}`` of every module, class and function."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        out[rel] = ("module", len(text.splitlines()))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                key = f"{rel}:{node.name}"
                size = node.end_lineno - node.lineno + 1
                if key not in out or out[key][1] < size:
                    out[key] = (kind, size)
    return out


def test_no_module_class_or_function_is_over_its_limit():
    limit = {"module": MAX_MODULE, "class": MAX_CLASS, "function": MAX_FUNCTION}
    over = {k: n for k, (kind, n) in _sizes().items()
            if n > EXCEPTIONS.get(k, limit[kind])}
    assert not over, f"over the limit (split them, or name a reason in EXCEPTIONS): {over}"


def test_every_exception_names_something_that_exists():
    sizes = _sizes()
    assert not [k for k in EXCEPTIONS if k not in sizes], "an exception names nothing"
