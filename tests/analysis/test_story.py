"""The real-data story folder (`anchorviz.analysis.story`) and its figures and explorer
(`anchorviz.viz.story`): exported from a synthetic sweep with hand-made cue blocks, the slices,
seed intervals, paired differences and drift read back exactly; bad folders are named errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_sweep import write_fake_sweep
from scipy import stats

from anchorviz.analysis.story import (
    StoryError,
    drift_summary,
    load_story,
    seal_story,
    slice_contrast,
    slice_summary,
)
from anchorviz.viz.common import load_results
from anchorviz.viz.story import (
    StoryExplorer,
    cue_audit_figure,
    export_story,
    slice_figure,
    target_drift_figure,
)

SEEDS = (0, 1, 2)
LAMBDAS = (0.3, 3.0)
SPLITS = ("source_test", "target_test:amazon", "target_test:nyt")
# disagree-slice accuracy of the length cue per method and seed (follow = 1 - this); agree
# accuracy is 0.5 + seed / 10 for every run
DIS = {"teacher": (0.40, 0.45, 0.50), "ceiling": (0.60, 0.62, 0.70), "naive": (0.30, 0.35, 0.31),
       ("anchor", 0.3): (0.50, 0.40, 0.45), ("anchor", 3.0): (0.55, 0.60, 0.58)}


def _iv(n: int, p: float) -> dict:
    return {"n": n, "point": p, "lo": p - 0.1, "hi": p + 0.1}


def _sweep(tmp_path: Path) -> Path:
    sweep = write_fake_sweep(tmp_path / "s", seeds=SEEDS, methods=("naive", "anchor"),
                             lambdas=LAMBDAS, layers=("last",))
    for r in load_results(sweep).itertuples(index=False):
        key = ("anchor", float(r.anchor_lambda)) if r.method == "anchor" else r.method
        dis = DIS[key][SEEDS.index(int(r.seed))]
        block = {s: {"length": {"n": 50, "agree": _iv(30, 0.5 + r.seed / 10),
                                "disagree": _iv(20, dis), "follow": _iv(50, 0.5),
                                "interval": "cluster"},
                     "format": {"n": 0}}
                 for s in SPLITS}
        block["ood"] = block["target_test:amazon"]
        path = sweep / "runs" / r.run_id / "metrics.json"
        m = json.loads(path.read_text())
        m["cues"] = block
        path.write_text(json.dumps(m))
    return sweep


AUDIT = pd.DataFrame({
    "dataset": ["a", "a", "b", "b"], "cue": ["length", "refusal", "length", "refusal"],
    "n": [100, 100, 80, 80], "n_side": [80, 10, 60, 30],
    "chosen_share": [0.6, 0.3, 0.45, 0.7], "chosen_share_lo": [0.5, 0.1, 0.35, 0.5],
    "chosen_share_hi": [0.7, 0.6, 0.55, 0.85]})


@pytest.fixture()
def story(tmp_path: Path):
    out = export_story({"src": _sweep(tmp_path)}, tmp_path / "story", audit=AUDIT, note="test")
    return load_story(out)


def _t_interval(x) -> tuple[float, float, float]:
    x = np.asarray(x, float)
    hw = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean(), x.mean() - hw, x.mean() + hw


def test_export_keeps_every_slice_and_drift_row(story, tmp_path: Path) -> None:
    res = load_results(tmp_path / "s")
    assert len(story.results) == len(res)
    # 3 splits x length per run (the empty format entry and the pooled "ood" are not kept)
    assert len(story.slices) == 3 * len(res)
    assert set(story.slices["cue"]) == {"length"}
    students = res[res["kind"] != "teacher"]
    assert len(story.drift) == len(students) * len(SPLITS) * 7  # layers 0..6
    assert story.stores == ["src"] and story.lambdas("src") == list(LAMBDAS)
    assert story.targets("src") == ["target_test:amazon", "target_test:nyt"]
    assert story.meta["stores"]["src"]["runs"] == len(res)
    assert story.audit is not None and len(story.audit) == 4


def test_slice_summary_and_contrast_by_hand(story) -> None:
    s = slice_summary(story, "src", "target_test:nyt", "length", 3.0).set_index("method")
    for method, key in (("naive", "naive"), ("ceiling", "ceiling"), ("anchor", ("anchor", 3.0))):
        mean, lo, hi = _t_interval(1 - np.array(DIS[key]))
        assert s.loc[method, "follow"] == pytest.approx(mean)
        assert s.loc[method, "follow_lo"] == pytest.approx(lo)
        assert s.loc[method, "follow_hi"] == pytest.approx(hi)
    assert s.loc["naive", "agree"] == pytest.approx(np.mean([0.5, 0.6, 0.7]))
    assert s.loc["naive", "n_disagree_min"] == 20
    c = slice_contrast(story, "src", "target_test:nyt", "length", 0.3)
    inherited = (1 - np.array(DIS["naive"])) - (1 - np.array(DIS["ceiling"]))
    anchor = (1 - np.array(DIS[("anchor", 0.3)])) - (1 - np.array(DIS["naive"]))
    for got, want in ((c["inherited"], inherited), (c["anchor"], anchor)):
        mean, lo, hi = _t_interval(want)
        assert (got["mean"], got["lo"], got["hi"]) == pytest.approx((mean, lo, hi))
        assert got["seeds"] == 3
    assert c["inherited"]["lo"] > 0  # the naive student follows it more than the ceiling here


def test_drift_summary_is_the_seed_mean_of_the_runs(story, tmp_path: Path) -> None:
    res = load_results(tmp_path / "s")
    ids = res[(res["method"] == "anchor") & np.isclose(res["anchor_lambda"], 0.3)]["run_id"]
    want = np.mean([pd.read_parquet(tmp_path / "s" / "runs" / r / "drift.parquet")
                    .query("split == 'target_test:nyt' and layer == 4")["cosine_centred_mean"]
                    .iloc[0] for r in ids])
    d = drift_summary(story, "src", 4, 0.3)
    got = d[(d["method"] == "anchor") & (d["split"] == "target_test:nyt")]["drift"].iloc[0]
    assert got == pytest.approx(want, rel=1e-5)
    with pytest.raises(StoryError, match=r"layer 9 not in store 'src'.*\[0, 1, 2, 3, 4, 5, 6\]"):
        drift_summary(story, "src", 9, 0.3)
    with pytest.raises(StoryError, match="no store 'other'"):
        story.lambdas("other")


def test_bad_story_folders_are_named_errors(story, tmp_path: Path) -> None:
    with pytest.raises(StoryError, match="no such story folder"):
        load_story(tmp_path / "nowhere")
    folder = story.folder
    meta = json.loads((folder / "story.json").read_text())
    (folder / "story.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(StoryError, match="format 99.*reads format 1"):
        load_story(folder)
    (folder / "story.json").write_text(json.dumps(meta))
    (folder / "drift.csv").unlink()
    with pytest.raises(StoryError, match=r"drift\.csv: missing"):
        load_story(folder)
    with pytest.raises(StoryError, match="no store given"):
        export_story({}, tmp_path / "x")
    with pytest.raises(StoryError, match="store 'bad'"):
        export_story({"bad": tmp_path / "empty"}, tmp_path / "x")


def test_slices_naming_unknown_runs_are_refused(story) -> None:
    s = pd.read_csv(story.folder / "slices.csv")
    s.loc[0, "run_id"] = "naive-000000000000"
    s.to_csv(story.folder / "slices.csv", index=False)
    with pytest.raises(StoryError, match=r"slices\.csv: changed since the story was exported"):
        load_story(story.folder)  # issue 43: an edit is refused by its hash first
    with pytest.raises(StoryError, match="naive-000000000000.*not in results.csv"):
        load_story(story.folder, verify=False)
    with pytest.raises(StoryError, match="naive-000000000000.*not in results.csv"):
        seal_story(story.folder)  # and cannot be accepted either


def test_figures_draw_the_summaries(story) -> None:
    fig = slice_figure(story, "src", "target_test:nyt", "length", 0.3)
    means = {t.name: t.y[0] for t in fig.data if t.name and t.xaxis == "x"}
    assert means["naive student"] == pytest.approx(100 * (1 - np.mean(DIS["naive"])))
    assert means["ANCHOR λ=0.3"] == pytest.approx(100 * (1 - np.mean(DIS[("anchor", 0.3)])))
    assert "naive − ceiling" in fig.layout.title.text
    d = target_drift_figure(story, "src", 6, 3.0)
    assert {t.name for t in d.data} == {"naive student", "ANCHOR λ=3", "gold ceiling"}
    a = cue_audit_figure(story)
    refusal = next(t for t in a.data if t.name == "refusal")
    assert list(refusal.y) == pytest.approx([30.0, 70.0])
    assert list(refusal.marker.symbol) == ["circle-open", "circle"]  # 10 pairs < 20 <= 30
    with pytest.raises(StoryError, match="no 'format' slice"):
        slice_figure(story, "src", "target_test:nyt", "format", 0.3)


def test_explorer_follows_its_controls(story) -> None:
    e = StoryExplorer(story)
    assert e.selection["split"] == "target_test:amazon" and e.selection["layer"] == 6
    assert "Naive − ceiling" in e.status_text
    before = [list(t.y) for t in e.figures["drift"].data]
    sel = e.update(lambda_=3, layer=2, split="nyt")
    assert sel == {"store": "src", "split": "target_test:nyt", "cue": "length", "lambda_": 3.0,
                   "layer": 2}
    assert [list(t.y) for t in e.figures["drift"].data] != before
    assert any(t.name == "ANCHOR λ=3" for t in e.figures["slices"].data)
    assert "too few to read" not in e.status_text  # 20 misleading pairs per seed
    with pytest.raises(ValueError, match=r"lambda_=7 is not in the story; choose one of \[0.3, 3.0\]"):
        e.update(lambda_=7)
    with pytest.raises(ValueError, match="unknown selection key"):
        e.update(seed=1)


def test_the_committed_story_of_notebook_04_loads() -> None:
    folder = Path(__file__).resolve().parents[2] / "notebooks" / "data" / "real_story"
    s = load_story(folder)
    assert "pku" in s.stores and s.audit is not None
    for store in s.stores:
        assert s.lambdas(store) and s.targets(store)
        for split in s.targets(store):
            summ = slice_summary(s, store, split, "length", s.lambdas(store)[0])
            assert (summ["seeds"] == 5).all()  # five seeds per method, as RESULTS reports


def test_explorer_flags_a_slice_too_small_to_read(story) -> None:
    s = pd.read_csv(story.folder / "slices.csv")
    s.loc[s["split"] == "target_test:amazon", "n_disagree"] = 5
    s.to_csv(story.folder / "slices.csv", index=False)
    seal_story(story.folder)  # a deliberate edit, accepted
    e = StoryExplorer(load_story(story.folder))
    assert "Only 5 misleading pair(s) on some seed: too few to read" in e.status_text
    e.update(split="nyt")
    assert "too few to read" not in e.status_text
