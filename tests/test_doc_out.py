"""Every experiment script that writes a markdown document writes it through
``experiments/doc_out.emit`` (printed, and written to ``--doc``), not a copy of its own: no
script but doc_out.py writes a text file itself (tables go out as CSV / parquet)."""

from __future__ import annotations

import ast
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def _writes(tree: ast.AST) -> list[str]:
    """The calls that write text: ``x.write_text(...)``, ``open(..., "w" / "a")``,
    ``x.open("w" / "a")``."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        modes = [a.value for a in node.args if isinstance(a, ast.Constant)
                 and isinstance(a.value, str)]
        if name.endswith(".write_text") or (
                (name == "open" or name.endswith(".open")) and any(m[:1] in "wa" for m in modes)):
            out.append(ast.unparse(node)[:60])
    return out


def test_scripts_write_their_documents_through_doc_out():
    emitting, writing = [], {}
    for path in sorted(EXPERIMENTS.glob("*.py")):
        if path.name == "doc_out.py":
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Call) and ast.unparse(n.func) == "doc_out.emit"
               for n in ast.walk(tree)):
            emitting.append(path.name)
        if _writes(tree):
            writing[path.name] = _writes(tree)
    assert not writing, writing
    assert len(emitting) >= 12, emitting  # every script with a --doc (or --out) document
