"""A first screen that teaches (issue 41): the report opens with its verdict in one plain
sentence and the verdict figure, spells out every abbreviation before it is used and lists them
in a glossary, names the command that made the folder; ``demo --help`` and ``cues --help`` open
with what the command does."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.analysis import summary
from anchorviz.cli import EXIT_OK, build_parser, main
from anchorviz.paths import COMMANDS_FILE, record_command
from anchorviz.viz.report import GLOSSARY, made_by, plain_verdict, write_report


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return write_fake_sweep(tmp_path_factory.mktemp("first_screen"), seeds=(0, 1, 2),
                            lambdas=(1.0, 10.0), layers=("last",), methods=("naive", "anchor"),
                            targets=("amazon", "nyt", "tweets"), artifact_strengths=(0.8,),
                            artifact_kind="marker", projection_layers=(6,))


@pytest.fixture(scope="module")
def page(sweep) -> str:
    return write_report(sweep).read_text(encoding="utf-8")


def _pos(page: str, needle: str) -> int:
    i = page.find(needle)
    assert i >= 0, f"{needle!r} not in the page"
    return i


def _visible_text(page: str) -> str:
    """The page's text in reading order, without scripts, styles or the figures' JSON."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


def first_uses_unexplained(text: str, glossary: dict[str, tuple[str, str]],
                           window: int = 120) -> list[str]:
    """Abbreviations whose first use has no spelled-out form within ``window`` characters."""
    bad = []
    for abbr, (spelled, _) in glossary.items():
        m = re.search(rf"(?<![\w-]){re.escape(abbr)}(?![\w-])", text)
        if m is None:
            continue
        near = text[max(0, m.start() - window): m.end() + window].lower()
        if spelled.lower() not in near:
            bad.append(f"{abbr} at {m.start()}: {text[max(0, m.start() - 60): m.end() + 20]!r}")
    return bad


def test_the_check_of_first_uses_catches_a_bare_abbreviation():
    gl = {"WRG": ("weak-to-strong raw gain", "")}
    assert first_uses_unexplained("the WRG is +3", gl)
    assert not first_uses_unexplained("the weak-to-strong raw gain (WRG) is +3; WRG > 0", gl)


def test_the_page_opens_with_the_sentence_then_the_verdict_figure(page):
    h1 = _pos(page, "<h1>")
    sentence = _pos(page, "id='verdict-sentence'")
    lead = _pos(page, "id='lead-figure'")
    first_figure = _pos(page, 'class="plotly-graph-div"')
    assert h1 < sentence < lead < first_figure < _pos(page, "id='header'")
    assert first_figure < _pos(page, "id='contents'") < _pos(page, "id='scenario'") \
        < _pos(page, "id='verdict'") < _pos(page, "<h2>Results</h2>") < _pos(page, "id='glossary'")


def test_the_sentence_is_the_verdict_of_failure_mode_in_plain_words(sweep, page):
    results = pd.read_parquet(sweep / "results.parquet")
    fm = summary.failure_mode(results)
    sentence = re.search(r"id='verdict-sentence'>(.*?)</p>", page, flags=re.S).group(1)
    sentence = html.unescape(sentence)
    assert sentence == plain_verdict(fm)
    assert f"{100 * abs(fm['wrg']['mean']):.1f} points" in sentence
    assert f"{abs(100 * fm['pooled']['aog']['mean']):.1f}" in sentence
    assert ("the failure mode" in sentence) == fm["failure_mode"]
    assert "in distribution (ID" in sentence and "out of distribution (OOD" in sentence
    assert sentence.count(". ") == 0, "one sentence"


def test_the_sentence_follows_the_numbers_when_the_gain_carries_over(sweep):
    """The same store with the naive students' OOD gain raised to their ID gain: no failure
    mode, and the sentence says so instead of repeating a canned conclusion."""
    results = pd.read_parquet(sweep / "results.parquet")
    naive = results["method"] == "naive"
    for col in [c for c in results.columns if c == "aog" or c.startswith("aog_")
                if not c.endswith(("_lo", "_hi"))]:
        results.loc[naive, col] = results.loc[naive, "wrg"] + 0.01
    fm = summary.failure_mode(results)
    assert not fm["failure_mode"]
    sentence = plain_verdict(fm)
    assert "does not show the failure mode" in sentence or "no failure mode" in sentence
    assert "only" not in sentence  # the OOD gain is not smaller than the ID gain here
    one = summary.failure_mode(results[results["seed"] == 0])
    assert "no verdict" in plain_verdict(one)


def test_every_abbreviation_is_spelled_out_at_first_use_and_in_the_glossary(page):
    text = _visible_text(page)
    assert not first_uses_unexplained(text, GLOSSARY), first_uses_unexplained(text, GLOSSARY)
    glossary = page[_pos(page, "id='glossary'"):]
    for abbr, (spelled, _) in GLOSSARY.items():
        assert f"<dt>{abbr}</dt>" in glossary and html.escape(spelled) in glossary
    # the abbreviations the issue names are all in it
    assert {"W2S", "WRG", "AOG", "NTS", "PGR", "CKA", "OOD", "ID"} <= set(GLOSSARY)


def test_made_by_names_the_recorded_command_line(tmp_path, sweep):
    folder = tmp_path / "store"
    shutil.copytree(sweep, folder)
    assert "no command line is recorded" in made_by(folder)
    record_command(folder, ["demo", "--seeds", "0", "1", "--out", str(folder)])
    text = made_by(folder)
    assert text.startswith(f"anchorviz demo --seeds 0 1 --out {folder}") and "UTC" in text
    record_command(folder, ["report", str(folder)])
    assert "1 earlier command(s)" in made_by(folder) and COMMANDS_FILE in made_by(folder)


def test_the_cli_records_the_command_that_wrote_a_folder(tmp_path, monkeypatch, sweep):
    def fake_sweep(sw, out, **kw):
        return pd.DataFrame({"method": []})

    monkeypatch.setattr("anchorviz.pipeline.sweep.sweep", fake_sweep)
    out = tmp_path / "made"
    config = str(Path(__file__).resolve().parents[1] / "configs" / "sweep.yaml")
    assert main(["sweep", config, "--out", str(out)]) == EXIT_OK
    assert f"anchorviz sweep {config} --out {out}" in (out / COMMANDS_FILE).read_text()
    # the report names it, and names the command that wrote the page
    store = tmp_path / "store"
    shutil.copytree(sweep, store)
    shutil.copy(out / COMMANDS_FILE, store / COMMANDS_FILE)
    assert main(["report", str(store)]) == EXIT_OK
    header = re.search(r"id='header'>(.*?)</p>",
                       (store / "report.html").read_text(encoding="utf-8"), flags=re.S).group(1)
    header = html.unescape(header)
    assert f"runs made by: anchorviz sweep {config} --out {out}" in header
    assert f"this page by: anchorviz report {store}" in header


@pytest.mark.parametrize("command, opening", [
    ("demo", "Shows, on your CPU and offline, whether a strong student trained on a weak"),
    ("cues", "Audits preference pairs before any model is trained"),
])
def test_help_opens_with_what_the_command_does(command, opening):
    text = build_parser()._subparsers._group_actions[0].choices[command].format_help()
    after_usage = text.split("\n\n", 1)[1]
    assert after_usage.lstrip().startswith(opening), after_usage[:200]
