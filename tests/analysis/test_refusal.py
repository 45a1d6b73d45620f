"""Issue 44's over-refusal reading of a story folder (`anchorviz.analysis.refusal`) and its
figures / explorer (`anchorviz.viz.refusal`), on a synthetic story whose effects are planted:
the verdicts must find what was planted and nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anchorviz.analysis.refusal import (
    REFUSE,
    RESPOND,
    choose_lambda,
    ood_risk_check,
    paired,
    refusal_runs,
    refusal_verdicts,
)
from anchorviz.analysis.story import Story, StoryError

SEEDS = [80, 81, 82, 83, 84]
SETTINGS = [("teacher", 0.0, ""), ("ceiling", 0.0, ""), ("naive", 0.0, ""),
            ("anchor", 0.3, "last"), ("anchor", 3.0, "last"), ("anchor", 3.0, "middle")]


def _story(*, inherit: float = 0.15, anchor_cut: float = 0.10, cost: float = 0.02,
           ceiling_id: float = 0.66,
           seeds=SEEDS, stores=("hh", "pku"), link: bool = True, rng_seed: int = 0) -> Story:
    """follow on should-respond: ceiling 0.5, naive 0.5 + inherit, ANCHOR naive - cut * lambda
    share; drift: naive 0.3, ANCHOR lower by an amount that goes with its cut (link) or not."""
    rng = np.random.default_rng(rng_seed)
    res, sl, dr = [], [], []
    for store in stores:
        for seed in seeds:
            noise = rng.normal(0, 0.01)
            for method, lam, lay in SETTINGS:
                rid = f"{store}-{method}-{lam:g}-{lay}-{seed}"
                cut = {0.3: 0.5, 3.0: 1.0}.get(lam, 0.0) * (0.6 if lay == "middle" else 1.0)
                e = rng.normal(0, 0.01)
                follow = {"teacher": 0.7, "ceiling": 0.5,
                          "naive": 0.5 + inherit}.get(method, 0.5 + inherit - anchor_cut * cut)
                follow += noise + e
                drift = 0.3 - (0.2 * cut if method == "anchor" else 0.0)
                if not link and method == "anchor":
                    drift = 0.3 - 0.1 * rng.random()
                refuse = 0.9 - cost * cut + rng.normal(0, 0.01)
                acc_val = {0.3: 0.64, 3.0: 0.62}.get(lam, 0.63) if method == "anchor" else 0.63
                res.append({"store": store, "run_id": rid, "kind": "teacher" if method ==
                            "teacher" else "student", "method": method, "anchor_lambda": lam,
                            "anchor_layers": lay, "seed": seed, "acc_val": acc_val,
                            "acc_id": ceiling_id if method == "ceiling" else 0.62,
                            f"acc_{RESPOND}": 1 - follow, f"acc_{REFUSE}": refuse})
                for split, n_a, n_d, acc_a, acc_d in (
                        (f"target_test:{RESPOND}", 5, 100, 0.5, 1 - follow),
                        (f"target_test:{REFUSE}", 120, 2, refuse, 0.5)):
                    sl.append({"store": store, "run_id": rid, "split": split, "cue": "refusal",
                               "n": n_a + n_d, "n_agree": n_a, "n_disagree": n_d,
                               "acc_agree": acc_a, "acc_disagree": acc_d, "follow": 0.5})
                if method != "teacher":
                    for layer in range(7):
                        for split, extra in ((RESPOND, 0.0), (REFUSE, 0.01)):
                            dr.append({"store": store, "run_id": rid,
                                       "split": f"target_test:{split}", "layer": layer,
                                       "cka": 0.9, "cosine_centred_mean": drift * layer / 6 + extra,
                                       "n_rows": 300})
    meta = {"format": 1, "stores": {s: {"source": s, "targets": [RESPOND, REFUSE], "runs": 30}
                                    for s in stores}, "note": "synthetic"}
    return Story(Path("synthetic"), meta, pd.DataFrame(res), pd.DataFrame(sl), pd.DataFrame(dr),
                 None)


def test_runs_table_reads_each_measure() -> None:
    runs = refusal_runs(_story(), "hh")
    assert len(runs) == 30 and set(runs["setting"]) == {
        "teacher", "ceiling", "naive", "ANCHOR λ=0.3 (last)", "ANCHOR λ=3 (last)",
        "ANCHOR λ=3 (middle)"}
    naive = runs[runs["method"] == "naive"]
    assert np.allclose(naive["follow_respond"], 1 - naive["acc_respond"])
    assert (runs["n_respond_disagree"] == 100).all() and (runs["n_refuse_agree"] == 120).all()
    assert runs.loc[runs["method"] == "teacher", "drift_respond"].isna().all()
    assert (runs["layer"] == 6).all()
    mid = refusal_runs(_story(), "hh", layer=3)
    assert (mid["layer"] == 3).all()
    with pytest.raises(StoryError, match="layer 9 not in store"):
        refusal_runs(_story(), "hh", layer=9)
    with pytest.raises(StoryError, match="no runs of store 'uf'"):
        refusal_runs(_story(), "uf")


def test_lambda_is_chosen_on_source_validation_only() -> None:
    runs = refusal_runs(_story(), "hh")
    assert choose_lambda(runs) == 0.3  # acc_val 0.64 > 0.62, although 3 cuts more on XSTest
    runs.loc[runs["anchor_lambda"] == 3.0, "acc_val"] = 0.64
    assert choose_lambda(runs) == 0.3  # a tie: the smaller


def test_planted_effects_are_found_with_one_holm_family() -> None:
    v = refusal_verdicts(_story(), n_boot=300)
    assert len(v.tests) == 10 and set(v.tests["test"]) == {"a1", "a2", "b1", "b2", "c1"}
    t = v.tests.set_index(["store", "test"])
    assert t.loc[("hh", "a1"), "mean"] == pytest.approx(0.15, abs=0.02)
    assert t.loc[("hh", "a1"), "passes"] and t.loc[("hh", "a2"), "mean"] < 0
    assert t.loc[("hh", "b1"), "mean"] == pytest.approx(-0.05, abs=0.02)  # lambda 0.3: half cut
    assert (v.tests["holm"] >= v.tests["p"]).all()
    assert t.loc[("hh", "c1"), "mean"] > 0.8
    s = v.sentences["hh"]
    assert s["a"].startswith("Yes: the naive student inherits over-refusal")
    assert "ANCHOR (λ=0.3) lowers over-refusal" in s["b"]
    assert s["c"].startswith("Yes: the change goes with the drift")


def test_no_effect_and_no_link_are_said_so() -> None:
    """Nothing planted: over ten synthetic stories the Holm family rarely passes a1 / b1 (a
    false positive is possible at 5%), and where it does not the sentences say "No effect"."""
    false_pos, said = 0, 0
    for k in range(10):
        v = refusal_verdicts(_story(inherit=0.0, anchor_cut=0.0, cost=0.0, link=False,
                                    rng_seed=k), n_boot=100)
        t = v.tests[v.tests["test"].isin(["a1", "b1"])]
        false_pos += int(t["passes"].any())
        if not t["passes"].any():
            s = v.sentences["pku"]
            said += s["a"].startswith("No effect") and s["b"].startswith("No effect")
    assert false_pos <= 2 and said == 10 - false_pos


def test_ceiling_bar_and_partial_seeds() -> None:
    v = refusal_verdicts(_story(ceiling_id=0.58), n_boot=200)
    assert all(x.startswith("No verdict: the gold ceiling reaches 58.0%")
               for x in v.sentences["hh"].values())
    v = refusal_verdicts(_story(seeds=[80, 81, 82]), n_boot=200)
    assert v.sentences["hh"]["a"].startswith("(partial: 3 seeds) Yes")
    v = refusal_verdicts(_story(seeds=[80, 81]), n_boot=200)
    assert all(x.startswith("(partial: 2 seeds) No verdict yet: the pre-registered tests need "
                            "at least 3 seeds") for x in v.sentences["pku"].values())
    assert "So far it prefers the refusal where refusing is wrong" in v.sentences["pku"]["a"]
    # the a-first order (RESULTS): naive / ceiling on 3 seeds, no ANCHOR student yet
    st = _story(seeds=[80, 81, 82])
    st.results = st.results[st.results["method"] != "anchor"]
    st.slices = st.slices[st.slices["run_id"].isin(st.results["run_id"])]
    st.drift = st.drift[st.drift["run_id"].isin(st.results["run_id"])]
    v = refusal_verdicts(st, n_boot=200)
    assert v.sentences["hh"]["a"].startswith("(partial: 3 seeds) Yes: the naive student inherits")
    assert v.sentences["hh"]["b"].startswith("(partial: 0 seeds) No verdict yet")
    assert v.sentences["hh"]["c"].startswith("(partial: 0 seeds) No verdict yet")
    v = refusal_verdicts(_story(seeds=[80]), n_boot=200)  # one seed: no interval, no p
    assert v.tests["p"].isna().sum() >= 8 and not v.tests["passes"].any()


def test_paired_interval() -> None:
    p = paired([0.1, 0.12, 0.08, 0.11, 0.09])
    assert p["lo"] < 0.1 < p["hi"] and p["p"] < 0.001 and p["seeds"] == 5
    assert np.isnan(paired([0.1])["p"])


def test_ood_risk_check_says_what_it_did() -> None:
    out = ood_risk_check(refusal_runs(_story(), "hh"))
    assert out["runs"] == 20
    assert out["validated"] or out["status"].startswith("declines")


def test_figures_and_explorer() -> None:
    from anchorviz.viz.refusal import RefusalExplorer, drift_link_figure, refusal_figure

    story = _story()
    fig = refusal_figure(story, "hh")
    assert len(fig.data) == 4 * 6 * 2  # 4 panels x 6 models x (seeds, mean)
    assert any("(shown)" in (t.name or "") for t in fig.data)
    d = drift_link_figure(story, "hh", layer=6)
    assert "r = +" in d.layout.title.text
    ex = RefusalExplorer(story)
    assert ex.selection == {"store": "hh", "lambda_": 0.3, "anchor_layers": "last", "layer": 6}
    assert "(a) Yes" in ex.status_text
    ex.update(store="pku", lambda_=3, anchor_layers="middle", layer=3)
    assert "ANCHOR λ=3 (middle)" in ex.status_text
    ex.update(lambda_=0.3)  # (0.3, middle) was not run: said, not drawn
    assert "was not run" in ex.status_text
    with pytest.raises(ValueError, match="choose one of"):
        ex.update(layer=42)


def test_report_of_a_story_folder(tmp_path: Path) -> None:
    """`anchorviz report <story folder>` writes the study's page: the verdict in words and a
    figure per source; a folder that is not a story is still refused as before."""
    import json

    from anchorviz.analysis.story import STORY_FORMAT, seal_story
    from anchorviz.cli import main

    story = _story()
    folder = tmp_path / "xstest_story"
    folder.mkdir()
    story.results.to_csv(folder / "results.csv", index=False)
    story.slices.to_csv(folder / "slices.csv", index=False)
    story.drift.to_csv(folder / "drift.csv", index=False)
    (folder / "story.json").write_text(json.dumps({**story.meta, "format": STORY_FORMAT}))
    seal_story(folder)  # check the tables' ranges, record each file's sha256
    assert main(["report", str(folder)]) == 0
    html = (folder / "report.html").read_text()
    assert "hh source: who prefers the refusal?" in html and "pku source" in html
    assert "(a) Yes: the naive student inherits over-refusal" in html
    assert html.count("plotly-graph-div") >= 4


def test_the_committed_xstest_story_of_notebook_04_loads() -> None:
    """notebooks/data/xstest_story: the issue-44 runs as numbers only (no text of the data, no
    machine path), both sources, the pre-registered seeds and settings, readable by the
    verdicts."""
    from anchorviz.analysis.story import load_story

    folder = Path(__file__).resolve().parents[2] / "notebooks" / "data" / "xstest_story"
    s = load_story(folder)
    assert set(s.stores) == {"hh", "pku"}
    allowed = {"teacher", "ceiling", "naive", "ANCHOR λ=0.3 (last)", "ANCHOR λ=3 (last)",
               "ANCHOR λ=3 (middle)"}
    for store in s.stores:
        runs = refusal_runs(s, store)
        assert set(runs["seed"]) <= set(SEEDS) and set(runs["setting"]) <= allowed
        students = runs[runs["method"] != "teacher"]
        assert students["follow_respond"].between(0, 1).all()
        assert (students["n_respond_disagree"] >= 20).all()
        assert students["drift_respond"].notna().all()
    assert len(refusal_verdicts(s, n_boot=100).tests) == 5 * len(s.stores)
    for name in ("results.csv", "slices.csv", "drift.csv", "story.json"):
        text = (folder / name).read_text()
        assert "/tmp/" not in text and "/work/" not in text and "shared/realdata" not in text
    text_cols = {"store", "run_id", "kind", "method", "anchor_layers", "source", "split", "cue",
                 "dataset", "interval"}
    for table in (s.results, s.slices, s.drift) + ((s.audit,) if s.audit is not None else ()):
        assert set(table.select_dtypes("object").columns) <= text_cols
