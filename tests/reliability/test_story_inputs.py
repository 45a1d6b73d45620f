"""Reliability (issue 43, point 1): committed story folders are verified like run folders.

Before: one ``acc_ood`` of a copy of ``notebooks/data/real_story/results.csv`` set from 0.534
to 30.534 was returned by ``load_story`` without a word. Now ``story.json`` records the sha256
of every file (`seal_story`, the last step of `export_story`): an edited file is refused,
naming it; the numbers are range-checked (file, column and row named); an explicit re-export
or `seal_story` is the one way to accept an edit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from anchorviz.analysis.story import StoryError, load_story, seal_story

COMMITTED = Path(__file__).resolve().parents[2] / "notebooks" / "data" / "real_story"


@pytest.fixture
def copy(tmp_path) -> Path:
    return Path(shutil.copytree(COMMITTED, tmp_path / "real_story"))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_committed_story_records_a_hash_of_every_file_and_verifies():
    meta = json.loads((COMMITTED / "story.json").read_text())
    assert set(meta["sha256"]) == {"results.csv", "slices.csv", "drift.csv", "audit.csv"}
    story = load_story(COMMITTED)
    assert story.results["acc_ood"].between(0, 1).all()


def test_a_tampered_accuracy_is_refused_naming_the_file(copy):
    # the red-team's edit: 0.534167 -> 30.534167 in the first row of results.csv
    _edit(copy / "results.csv", ",0.534167,", ",30.534167,")
    with pytest.raises(StoryError, match=r"results\.csv: changed since the story was exported"):
        load_story(copy)
    with pytest.raises(StoryError, match=r"results\.csv: column 'acc_ood', row 1 \(line 2\) "
                                         r"\(run ceiling-ebf0f0f9cee6\): 30\.534167 is not in "
                                         r"\[0, 1\]"):
        load_story(copy, verify=False)
    with pytest.raises(StoryError, match="column 'acc_ood', row 1"):
        seal_story(copy)  # an out-of-range value cannot be accepted


def test_an_in_range_edit_of_the_same_size_is_refused_until_it_is_sealed(copy):
    _edit(copy / "results.csv", ",0.534167,", ",0.634167,")
    with pytest.raises(StoryError, match=r"results\.csv: changed since .*seal_story"):
        load_story(copy)
    seal_story(copy)  # the explicit acceptance
    assert load_story(copy).results["acc_ood"].iloc[0] == pytest.approx(0.634167)


@pytest.mark.parametrize(("file", "old", "new", "column"), [
    ("slices.csv", "source_test,format,11,5,6,", "source_test,format,11,-5,6,", "n_agree"),
    ("slices.csv", "source_test,format,11,5,6,", "source_test,format,11.5,5,6,", "n"),
    ("slices.csv", ",0.6,0.666667,0.454545", ",0.6,1.666667,0.454545", "acc_disagree"),
    ("drift.csv", ",0,0.999993,", ",0,inf,", "cka"),
    ("audit.csv", ",1058,length,1058,891,0.842155,", ",1058,length,1058,891,-0.842155,",
     "side_share"),
])
def test_out_of_range_values_name_file_column_and_row(copy, file, old, new, column):
    _edit(copy / file, old, new)
    with pytest.raises(StoryError, match=rf"{file.replace('.', '[.]')}: column '{column}', "
                                         r"row \d+ \(line \d+\)"):
        load_story(copy, verify=False)


def test_a_story_without_hashes_or_missing_a_file_is_refused(copy):
    meta = json.loads((copy / "story.json").read_text())
    (copy / "story.json").write_text(json.dumps({k: v for k, v in meta.items()
                                                 if k != "sha256"}))
    with pytest.raises(StoryError, match="records no sha256 of its files"):
        load_story(copy)
    seal_story(copy)
    load_story(copy)
    (copy / "audit.csv").unlink()
    with pytest.raises(StoryError, match=r"audit\.csv: missing"):
        load_story(copy)
