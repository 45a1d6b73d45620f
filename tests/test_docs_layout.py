"""The documents' layout: results documents live under docs/results/<study>/, every document a
file of the repository cites exists, and no document records a path of one machine."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
#: the prefixes of paths that exist on one machine only (a home or work folder)
MACHINE_PATHS = re.compile(r"(?<![\w.~])(/root/|/home/\w|/Users/\w|/work/\w|[A-Z]:\\\\Users)")
CITED_DOC = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)")


def _documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "experiments" / "README.md",
            *sorted(DOCS.rglob("*.md"))]


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.ipynb", "*.sh", "*.toml"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:  # an unpacked sdist, not a clone
        pytest.skip(f"not a git checkout ({e})")
    return [REPO / p for p in out.splitlines() if (REPO / p).is_file()]


def test_results_documents_live_in_study_folders():
    assert not sorted(p.name for p in DOCS.glob("results_*.md")), \
        "results documents belong in docs/results/<study>/"
    studies = [p for p in (DOCS / "results").iterdir() if p.is_dir()]
    assert len(studies) >= 5
    for p in (DOCS / "results").rglob("*.md"):
        rel = p.relative_to(DOCS / "results")
        assert len(rel.parts) == 2 or rel.name == "README.md", f"{rel}: not in a study folder"
    index = (DOCS / "results" / "README.md").read_text()
    for study in studies:  # the index names every study's folder
        assert f"]({study.name}/)" in index, study.name


def test_no_document_records_a_machine_specific_path():
    bad = [f"{p.relative_to(REPO)}:{i}: {m.group(0)}"
           for p in _documents()
           for i, line in enumerate(p.read_text().splitlines(), 1)
           for m in [MACHINE_PATHS.search(line)] if m]
    assert not bad, bad


def test_machine_path_pattern_catches_what_it_should():
    assert MACHINE_PATHS.search("--doc /work/rt/x.md")
    assert MACHINE_PATHS.search("--students /root/.cache/anchorviz/local/m")
    assert not MACHINE_PATHS.search("--students ~/.cache/anchorviz/local/m /tmp/scratch")


def test_every_cited_document_exists():
    missing = set()
    for p in _tracked_text_files():
        for m in CITED_DOC.finditer(p.read_text(errors="replace")):
            cited = m.group(1).rstrip(".")
            if "*" in cited or "<" in cited:
                continue
            if not (REPO / cited).is_file():
                missing.add(f"{p.relative_to(REPO)} cites {cited}")
    assert not missing, sorted(missing)
