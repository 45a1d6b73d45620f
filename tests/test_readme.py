"""The README is a front page (issue 41): what the tool shows, its picture and the two commands
within 150 words, 1,200 words in all, the demo's numbers named in words once, every picture and
command it names present, and notebook 03's controls named as the explorer labels them."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _words(text: str) -> int:
    """Words as a reader counts them: markup and link targets dropped, image alt text kept."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)  # an image: its alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its words
    return len(re.findall(r"[\w][\w'’.-]*", text))


def _first_command_line(text: str) -> int:
    """Index of the first line of the first code block (indented four spaces or fenced)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```") or (line.startswith("    ") and line.strip()
                                      and (i == 0 or not lines[i - 1].strip())):
            return i
    raise AssertionError("the README has no command")


def test_the_first_command_comes_within_150_words_and_the_page_within_1200():
    lines = README.splitlines()
    first = _first_command_line(README)
    before = "\n".join(lines[:first])
    assert _words(before) <= 150, _words(before)
    assert _words(README) <= 1200, _words(README)
    # the first code block holds the two commands, and both are true
    block = "\n".join(lines[first:first + 4])
    assert "bash scripts/demo.sh" in block and "bash .ci/run" in block, block
    assert (REPO / "scripts" / "demo.sh").is_file() and (REPO / ".ci" / "run").is_file()


def test_the_word_counts_read_markup_as_a_reader_does():
    assert _words("![the verdict figure](docs/screenshots/verdict.png) and [RESULTS](docs/RESULTS.md)") \
        == 5
    assert _first_command_line("intro\n\n    bash x\n") == 2


def test_the_picture_comes_before_the_first_command_and_every_picture_exists():
    first = _first_command_line(README)
    before = "\n".join(README.splitlines()[:first])
    assert re.search(r"!\[[^\]]+\]\(docs/screenshots/[\w.-]+\.png\)", before)
    for path in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README):
        assert (REPO / path).is_file(), path


def test_the_demo_numbers_are_spelled_out_once():
    for abbr, words in {"WRG": "weak-to-strong raw gain", "AOG": "absolute out-of-distribution gain",
                        "NTS": "net transfer score", "CKA": "centred kernel alignment"}.items():
        assert words in README.lower(), abbr
        # spelled out at or before its first use
        assert README.lower().index(words) <= README.index(abbr) + 120, abbr


def test_the_readme_carries_no_dated_history():
    """History, superseded settings and dated timings live in CHANGELOG, RESULTS, BENCHMARKS."""
    assert not re.search(r"until 20\d\d-\d\d-\d\d|\(20\d\d-\d\d-\d\d\)|earlier 1,500", README)


def test_notebook_03s_controls_are_named_as_the_explorer_labels_them(tmp_path):
    """Every control of the explorer notebook 03 shows (`SweepExplorer`) is in the README's
    paragraph on notebook 03 with its label and its kind (slider, dropdown, buttons), and the
    paragraph names no slider the explorer lacks."""
    import ipywidgets as widgets
    from fake_sweep import write_fake_sweep

    from anchorviz.viz.widgets import SweepExplorer

    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1), lambdas=(0.1, 1.0),
                             layers=("last",), methods=("naive", "anchor"),
                             artifact_strengths=(0.5, 0.9), artifact_kind="marker",
                             teacher_visibilities=(0.5, 1.0), projection_layers=(6,))
    controls = SweepExplorer(sweep)._controls().values()
    para = README[README.index("**03_anchor_explorer**"):]
    para = para[:para.index("\n\n")]
    kinds = {"slider": 0, "dropdown": 0, "buttons": 0}
    for w in controls:
        kind = ("slider" if "Slider" in type(w).__name__ else
                "buttons" if isinstance(w, widgets.ToggleButtons) else "dropdown")
        kinds[kind] += 1
        assert f"`{w.description}`" in para, (w.description, para)
        # the label is said with its kind: "`x` slider", or in a list that ends in "dropdowns"
        after = para[para.index(f"`{w.description}`"):]
        nxt = re.search(r"\b(slider|dropdown|buttons)", after)
        assert nxt and nxt.group(1) == kind, (w.description, kind, after[:80])
    assert para.count("slider") <= kinds["slider"]
