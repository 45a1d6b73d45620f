"""Figures hold the stored numbers: each test reads the fake sweep's files and checks the traces."""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.analysis.metrics import seed_summary
from anchorviz.viz.accuracy import accuracy_figure, shortcut_figure, transfer_figure
from anchorviz.viz.common import load_results, load_run_table, run_path
from anchorviz.viz.drift import (
    MIN_CORRELATION_N,
    drift_by_layer_figure,
    drift_vs_ood_figure,
    lambda_sweep_figure,
)
from anchorviz.viz.export import ExportError, export_figure
from anchorviz.viz.projection import umap_figure
from anchorviz.viz.training import label_confidence_figure


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return write_fake_sweep(tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory) -> Path:
    """One seed, two artefact strengths: single-seed intervals and condition selection."""
    return write_fake_sweep(tmp_path_factory.mktemp("one_seed"), seeds=(0,), lambdas=(0.1, 1.0),
                            layers=("last",), artifact_strengths=(0.0, 1.0),
                            artifact_kind="marker", projection_layers=(6,))


@pytest.fixture(scope="module")
def results(sweep) -> pd.DataFrame:
    return pd.read_parquet(sweep / "results.parquet")


def run_of(results: pd.DataFrame, method: str, seed: int = 0, lam: float = 0.0,
           layers: str = "") -> str:
    rows = results[(results["method"] == method) & (results["seed"] == seed)]
    if method == "anchor":
        rows = rows[np.isclose(rows["anchor_lambda"], lam) & (rows["anchor_layers"] == layers)]
    assert len(rows) == 1
    return rows["run_id"].iloc[0]


def trace(fig, **meta):
    found = [t for t in fig.data if isinstance(t.meta, dict)
             and all(t.meta.get(k) == v for k, v in meta.items())]
    assert len(found) == 1, f"{len(found)} traces match {meta}"
    return found[0]


def bar_value(tr, label: str) -> float:
    return float(np.asarray(tr.y)[list(tr.x).index(label)])


# --------------------------------------------------------------------------- readers


def test_load_results_reads_the_table_and_fills_defaults(sweep, results):
    res = load_results(sweep)
    assert list(res["run_id"]) == list(results["run_id"])
    np.testing.assert_allclose(res["acc_id"], results["acc_id"])
    assert (res.loc[res["method"] != "anchor", "anchor_layers"] == "").all()
    res.loc[0, "acc_id"] = -1.0  # a copy: the cached table stays intact
    assert load_results(sweep)["acc_id"].iloc[0] == results["acc_id"].iloc[0]


def test_missing_sweep_and_results_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_results(tmp_path / "nope")
    (tmp_path / "runs").mkdir()
    with pytest.raises(FileNotFoundError, match=r"results\.parquet.*still be running"):
        load_results(tmp_path)
    with pytest.raises(FileNotFoundError, match="nope"):
        accuracy_figure(tmp_path / "nope")


def test_results_without_key_columns_is_a_clear_error(results):
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['acc_id'\]"):
        accuracy_figure(results=results.drop(columns=["acc_id"]))
    with pytest.raises(ValueError, match="sweep directory or an already loaded"):
        accuracy_figure()


def test_load_run_table_validates_and_caches(sweep, results, tmp_path):
    rid = run_of(results, "naive")
    with pytest.raises(ValueError, match="choose one of"):
        load_run_table(sweep / "runs" / rid, "drfit")
    with pytest.raises(FileNotFoundError, match=r"val_labels\.parquet does not exist.*teacher"):
        load_run_table(sweep / "runs" / rid, "val_labels")
    first = load_run_table(sweep / "runs" / rid, "drift")
    assert load_run_table(sweep / "runs" / rid, "drift.parquet") is first
    # a rewritten file is read again
    run = tmp_path / "run"
    shutil.copytree(sweep / "runs" / rid, run)
    old = load_run_table(run, "drift")
    changed = old.assign(cka=0.5)
    changed.to_parquet(run / "drift.parquet")
    assert (load_run_table(run, "drift")["cka"] == 0.5).all()


# --------------------------------------------------------------------------- accuracy


def test_accuracy_bars_are_stored_accuracies_in_percent(sweep, results):
    fig = accuracy_figure(sweep)
    id_tr, ood_tr = trace(fig, column="acc_id"), trace(fig, column="acc_ood")
    teacher = results[results["method"] == "teacher"]
    assert bar_value(id_tr, "weak teacher (gold labels)") == pytest.approx(
        100 * teacher["acc_id"].mean())
    anchor = results[(results["method"] == "anchor") & np.isclose(results["anchor_lambda"], 0.1)
                     & (results["anchor_layers"] == "middle")]
    assert bar_value(ood_tr, "ANCHOR λ=0.1 (middle layers)") == pytest.approx(
        100 * anchor["acc_ood"].mean())
    # two seeds: error bars are the min / max over seeds, and the title says so
    i = list(id_tr.x).index("weak teacher (gold labels)")
    assert id_tr.error_y.array[i] == pytest.approx(100 * (teacher["acc_id"].max()
                                                          - teacher["acc_id"].mean()))
    assert "min to max over 2 seeds" in fig.layout.title.text
    assert fig.layout.yaxis.title.text == "pairwise accuracy (%)"
    labels = list(id_tr.x)
    assert labels[0] == "weak teacher (gold labels)" and labels[-1].startswith("strong ceiling")
    assert len(labels) == 1 + 1 + 1 + 6 + 1  # teacher, naive, confidence, 3x2 ANCHOR, ceiling


def test_shortcut_bars_split_id_by_the_artefact(results):
    rng = np.random.default_rng(0)
    res = results.assign(acc_id_marked=rng.uniform(0.9, 1.0, len(results)),
                         acc_id_clean=rng.uniform(0.6, 0.8, len(results)))
    fig = shortcut_figure(results=res)
    naive = res[res["method"] == "naive"]
    assert bar_value(trace(fig, column="acc_id_marked"), "naive W2S") == pytest.approx(
        100 * naive["acc_id_marked"].mean())
    assert bar_value(trace(fig, column="acc_id_clean"), "naive W2S") == pytest.approx(
        100 * naive["acc_id_clean"].mean())
    assert bar_value(trace(fig, column="acc_ood"), "naive W2S") == pytest.approx(
        100 * naive["acc_ood"].mean())
    assert "Shortcut or skill" in fig.layout.title.text
    with pytest.raises(ValueError, match="no artefact split"):
        shortcut_figure(results=results)
    # a teacher that reads only some markers: the marked pairs split into seen / hidden
    hidden = res.assign(acc_id_seen=rng.uniform(0.9, 1.0, len(res)),
                        acc_id_hidden=rng.uniform(0.7, 0.9, len(res)))
    fig = shortcut_figure(results=hidden)
    assert [t.meta["column"] for t in fig.data] == ["acc_id_seen", "acc_id_hidden",
                                                    "acc_id_clean", "acc_ood"]
    naive = hidden[hidden["method"] == "naive"]
    assert bar_value(trace(fig, column="acc_id_hidden"), "naive W2S") == pytest.approx(
        100 * naive["acc_id_hidden"].mean())


def test_accuracy_t_interval_and_per_target(sweep, results):
    fig = accuracy_figure(sweep, target="nyt", spread="t")
    ood = trace(fig, column="acc_nyt")
    naive = results.loc[results["method"] == "naive", "acc_nyt"]
    s = seed_summary(naive.to_numpy())
    i = list(ood.x).index("naive W2S")
    assert ood.y[i] == pytest.approx(100 * s.mean)
    assert ood.error_y.array[i] == pytest.approx(100 * s.half_width)
    assert "t-interval over 2 seeds" in fig.layout.title.text
    assert "target nyt" in ood.name
    with pytest.raises(ValueError, match=r"target 'tweets'.*\['amazon', 'nyt'\]"):
        accuracy_figure(sweep, target="tweets")
    with pytest.raises(ValueError, match="spread must be one of"):
        accuracy_figure(sweep, spread="sd")


def test_one_seed_uses_the_stored_bootstrap_interval(one_seed):
    res = pd.read_parquet(one_seed / "results.parquet")
    fig = accuracy_figure(one_seed, artifact_strength=1.0)
    id_tr = trace(fig, column="acc_id")
    row = res[(res["method"] == "naive") & (res["artifact_strength"] == 1.0)].iloc[0]
    i = list(id_tr.x).index("naive W2S")
    assert id_tr.y[i] == pytest.approx(100 * row["acc_id"])
    assert id_tr.error_y.arrayminus[i] == pytest.approx(100 * (row["acc_id"] - row["acc_id_lo"]))
    assert id_tr.error_y.array[i] == pytest.approx(100 * (row["acc_id_hi"] - row["acc_id"]))
    assert "bootstrap CI over test pairs (1 seed)" in fig.layout.title.text
    assert "strength 1" in fig.layout.title.text
    # default: the largest strength; an unknown one lists the choices
    assert accuracy_figure(one_seed).data[0].y[i] == pytest.approx(id_tr.y[i])
    with pytest.raises(ValueError, match=r"artifact_strength 0\.5.*\[0\.0, 1\.0\]"):
        accuracy_figure(one_seed, artifact_strength=0.5)


def test_transfer_scores_in_points(sweep, results):
    fig = transfer_figure(sweep)
    aog = trace(fig, score="aog")
    assert "weak teacher (gold labels)" not in list(aog.x)
    naive = results[results["method"] == "naive"]
    assert bar_value(aog, "naive W2S") == pytest.approx(100 * naive["aog"].mean())
    assert "points" in fig.layout.yaxis.title.text
    per_target = transfer_figure(sweep, target="amazon")
    nts = trace(per_target, score="nts")
    expected = (naive["aog_amazon"] - np.maximum(0, -naive["wrg"])).mean()
    assert bar_value(nts, "naive W2S") == pytest.approx(100 * expected)


# --------------------------------------------------------------------------- drift


def test_drift_trace_is_the_runs_drift_table(sweep, results):
    rid = run_of(results, "anchor", seed=1, lam=0.1, layers="last")
    table = pd.read_parquet(sweep / "runs" / rid / "drift.parquet")
    fig = drift_by_layer_figure(sweep, metric="cka", runs=[rid])
    for split in ("source_test", "target_test:amazon", "target_test:nyt"):
        tr = trace(fig, split=split, runs=[rid])
        want = table[table["split"] == split].sort_values("layer")
        np.testing.assert_allclose(tr.x, want["layer"])
        np.testing.assert_allclose(tr.y, want["cka"])
    assert fig.layout.yaxis.title.text == "linear CKA"  # the full name is in the subtitle
    assert "y: linear CKA(student, reference)" in fig.layout.title.text
    assert fig.layout.xaxis.title.text.startswith("layer")
    assert trace(fig, split="source_test", runs=[rid]).line.dash == "solid"
    assert trace(fig, split="target_test:amazon", runs=[rid]).line.dash != "solid"
    cos = drift_by_layer_figure(sweep, metric="cosine", runs=[rid], split="nyt")
    tr = trace(cos, split="target_test:nyt", runs=[rid])
    np.testing.assert_allclose(tr.y, table[table["split"] == "target_test:nyt"]
                               .sort_values("layer")["cosine_mean"])
    assert cos.layout.yaxis.title.text == "1 - cos (mean)"
    assert "y: cosine drift 1 - cos" in cos.layout.title.text
    assert {t.meta["split"] for t in cos.data} == {"target_test:nyt"}


def test_drift_by_layer_facets_one_panel_per_domain(sweep, results):
    fig = drift_by_layer_figure(sweep, metric="cka")
    splits = ["source_test", "target_test:amazon", "target_test:nyt"]
    assert fig.layout.meta["facets"] == splits
    for i, split in enumerate(splits):
        axis = "x" if i == 0 else f"x{i + 1}"
        on_panel = [t for t in fig.data if t.xaxis == axis]
        assert on_panel and all(t.meta["split"] == split for t in on_panel)
    assert [a.text for a in fig.layout.annotations][:3] == ["source (movie)", "target (amazon)",
                                                            "target (nyt)"]
    # one legend entry per method group, not one per group x domain
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert len(shown) == len(set(shown))
    flat = drift_by_layer_figure(sweep, metric="cka", facet=False)
    assert flat.layout.meta["facets"] == [] and {t.xaxis for t in flat.data} <= {None, "x"}


def test_drift_groups_average_over_seeds(sweep, results):
    fig = drift_by_layer_figure(sweep, split="source")
    ids = [run_of(results, "naive", seed=s) for s in (0, 1)]
    tables = [pd.read_parquet(sweep / "runs" / r / "drift.parquet") for r in ids]
    want = np.mean([t[t["split"] == "source_test"].sort_values("layer")["cka"] for t in tables],
                   axis=0)
    tr = trace(fig, split="source_test", group="naive W2S (mean of 2 seeds)")
    np.testing.assert_allclose(tr.y, want)
    one = drift_by_layer_figure(sweep, split="source", seed=1, methods=["naive"])
    np.testing.assert_allclose(trace(one, group="naive W2S", split="source_test").y,
                               tables[1][tables[1]["split"] == "source_test"]
                               .sort_values("layer")["cka"])


def test_drift_bad_input_lists_choices(sweep, results):
    with pytest.raises(ValueError, match="choose one of"):
        drift_by_layer_figure(sweep, metric="l2")
    with pytest.raises(ValueError, match=r"split 'tweets'.*\['source', 'amazon', 'nyt'\]"):
        drift_by_layer_figure(sweep, split="tweets")
    with pytest.raises(ValueError, match="not in the results table"):
        drift_by_layer_figure(sweep, runs=["anchor-000000000000"])
    with pytest.raises(ValueError, match=r"method\(s\) \['seam'\]"):
        drift_by_layer_figure(sweep, methods=["seam"])


# --------------------------------------------------------------------------- map


def test_umap_traces_are_the_projection_coordinates(sweep, results):
    rid = run_of(results, "naive")
    proj = pd.read_parquet(sweep / "runs" / rid / "projection.parquet")
    fig = umap_figure(sweep / "runs" / rid)
    last = proj[proj["layer"] == proj["layer"].max()]
    for model in ("reference", "student"):
        tr = trace(fig, model=model, group="source (movie)")
        want = last[(last["model"] == model) & (last["split"] == "source_test")]
        np.testing.assert_allclose(tr.x, want["x"])
        np.testing.assert_allclose(tr.y, want["y"])
    assert "layer 6" in fig.layout.title.text and "naive W2S" in fig.layout.title.text
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    move = trace(fig, model="movement")
    assert len(move.x) == 3 * 150  # start, end, gap per sampled response
    # the first segment joins a response's reference and student positions
    mx = np.asarray(move.x, dtype=float)
    ref = last[last["model"] == "reference"].set_index(["split", "pair_id", "side"])
    stu = last[last["model"] == "student"].set_index(["split", "pair_id", "side"])
    key = stu.index[np.isclose(stu["x"], mx[1])][0]
    assert ref.loc[key, "x"] == pytest.approx(mx[0])


def test_umap_layer_colour_and_target_choices(sweep, results):
    rid = run_of(results, "anchor", lam=1.0, layers="last")
    proj = pd.read_parquet(sweep / "runs" / rid / "projection.parquet")
    fig = umap_figure(sweep / "runs" / rid, layer=3, color_by="side", target="nyt")
    tr = trace(fig, model="student", group="chosen responses")
    want = proj[(proj["layer"] == 3) & (proj["model"] == "student") & (proj["side"] == "chosen")
                & proj["split"].isin(["source_test", "target_test:nyt"])]
    np.testing.assert_allclose(np.sort(tr.x), np.sort(want["x"]))
    with pytest.raises(ValueError, match=r"layer 4 has no projection; choose one of \[3, 6\]"):
        umap_figure(sweep / "runs" / rid, layer=4)
    with pytest.raises(ValueError, match="color_by"):
        umap_figure(sweep / "runs" / rid, color_by="method")
    teacher = run_of(results, "teacher")
    with pytest.raises(FileNotFoundError, match="projection.parquet"):
        umap_figure(sweep / "runs" / teacher)
    small = umap_figure(projection=proj, max_points=20, n_lines=5)
    assert all(len(t.x) <= 20 for t in small.data if t.meta["model"] != "movement")


def test_umap_names_the_projection_and_keeps_the_reference_visible(sweep, results, tmp_path):
    rid = run_of(results, "naive")
    run = tmp_path / "runs" / rid
    shutil.copytree(sweep / "runs" / rid, run)
    cfg = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(cfg + "capture: {projection: pca}\n")
    fig = umap_figure(run)
    assert fig.layout.meta["projection_method"] == "PCA"
    assert "shared PCA" in fig.layout.title.text and "UMAP" not in fig.layout.title.text
    assert fig.layout.xaxis.title.text.startswith("PCA axis 1")
    (run / "config.yaml").write_text(cfg + "capture: {projection: umap}\n")
    assert "shared UMAP" in umap_figure(run).layout.title.text
    proj = pd.read_parquet(run / "projection.parquet").assign(projection_method="umap")
    assert umap_figure(projection=proj).layout.meta["projection_method"] == "UMAP"
    # the reference is drawn last, as open markers: a student cloud cannot hide it
    models = [t.meta["model"] for t in fig.data]
    assert models.index("reference") > max(i for i, m in enumerate(models) if m == "student")
    ref = trace(fig, model="reference", group="source (movie)")
    assert ref.marker.symbol.endswith("-open") and ref.marker.opacity >= 0.8


# --------------------------------------------------------------------------- relations


def test_lambda_sweep_log_axis_and_values(sweep, results):
    fig = lambda_sweep_figure(sweep)
    xaxes = [fig.layout[k] for k in fig.layout if k.startswith("xaxis")]
    assert len(xaxes) == 4 and all(ax.type == "log" for ax in xaxes)
    assert all("λ" in ax.title.text for ax in xaxes)
    tr = trace(fig, column="acc_id", anchor_layers="middle")
    anchor = results[(results["method"] == "anchor") & (results["anchor_layers"] == "middle")]
    want = anchor.groupby("anchor_lambda")["acc_id"].mean()
    np.testing.assert_allclose(tr.x, want.index)
    np.testing.assert_allclose(tr.y, 100 * want.to_numpy())
    naive = trace(fig, column="nts", reference="naive")
    assert naive.y[0] == pytest.approx(100 * results.loc[results["method"] == "naive", "nts"].mean())
    assert trace(fig, column="nts", anchor_layers="last").line.dash != tr.line.dash
    with pytest.raises(ValueError, match="no ANCHOR runs"):
        lambda_sweep_figure(results=results[results["method"] != "anchor"])


def test_drift_vs_ood_pooled_reports_spearman(sweep, results):
    from anchorviz.analysis.drift import drift_ood_relation

    fig = drift_vs_ood_figure(sweep, by_target=False)
    students = results[results["kind"] == "student"]
    rel = drift_ood_relation(students, drift_col="drift_cos_target", gain_col="aog")
    assert f"Spearman ρ = {rel['spearman']:+.2f}" in fig.layout.title.text
    lo, hi = rel["spearman_ci"]
    assert f"{lo:+.2f} to {hi:+.2f}" in fig.layout.title.text
    assert f"n = {len(students)} runs" in fig.layout.title.text
    naive = trace(fig, group="naive W2S")
    want = students[students["method"] == "naive"]
    np.testing.assert_allclose(naive.x, want["drift_cos_target"])
    np.testing.assert_allclose(naive.y, 100 * want["aog"])
    assert "points" in fig.layout.yaxis.title.text and "1 - cos" in fig.layout.xaxis.title.text
    assert len([t for t in fig.data if (t.meta or {}).get("fit")]) == 1
    with pytest.raises(ValueError, match="candidates"):
        drift_vs_ood_figure(sweep, drift_col="drift_l2")


def test_drift_vs_ood_one_panel_per_target_from_the_drift_tables(sweep, results):
    from anchorviz.analysis.drift import drift_ood_relation

    fig = drift_vs_ood_figure(sweep)  # per target: the runs' drift tables are there
    assert fig.layout.meta["by_target"] and list(fig.layout.meta["relations"]) == ["amazon", "nyt"]
    students = results[results["kind"] == "student"]
    naive = students[students["method"] == "naive"]
    for i, t in enumerate(("amazon", "nyt")):
        want_x = []
        for rid in naive["run_id"]:
            d = pd.read_parquet(sweep / "runs" / rid / "drift.parquet")
            top = d[(d["layer"] == d["layer"].max()) & (d["split"] == f"target_test:{t}")]
            want_x.append(float(top["cosine_mean"].iloc[0]))
        tr = trace(fig, group="naive W2S", panel=t)
        np.testing.assert_allclose(tr.x, want_x)  # the drift on THIS target, not the mean
        np.testing.assert_allclose(tr.y, 100 * naive[f"aog_{t}"])
        assert tr.xaxis == ("x" if i == 0 else f"x{i + 1}")
        # seeds are told apart by the marker symbol
        assert len(set(tr.marker.symbol)) == naive["seed"].nunique() == 2
        rel = fig.layout.meta["relations"][t]
        assert rel is not None and rel["n"] == len(students)
    xs = {}
    for rid in students["run_id"]:
        d = pd.read_parquet(sweep / "runs" / rid / "drift.parquet")
        xs[rid] = float(d[(d["layer"] == d["layer"].max())
                          & (d["split"] == "target_test:nyt")]["cosine_mean"].iloc[0])
    ref = drift_ood_relation(students.assign(x=students["run_id"].map(xs)), drift_col="x",
                             gain_col="aog_nyt")
    titles = [a.text for a in fig.layout.annotations]
    assert any(f"Spearman ρ = {ref['spearman']:+.2f}" in a and "nyt" in a for a in titles)
    assert {t.meta["seed"] for t in fig.data if (t.meta or {}).get("legend_only")} == {0, 1}


def test_drift_vs_ood_draws_no_correlation_or_line_below_min_n(results):
    """Three students with an identical AOG, or any n below the stated minimum: points only,
    no Spearman rho and no fitted line (a 3-run rank correlation is +-1 or +-0.5)."""
    few = results[(results["kind"] == "student") & (results["seed"] == 0)
                  & results["method"].isin(["naive", "confidence", "anchor"])].head(3)
    fig = drift_vs_ood_figure(results=few)  # no drift tables: the pooled panel
    assert "no correlation shown" in fig.layout.title.text and "Spearman" not in fig.layout.title.text
    assert f"n ≥ {MIN_CORRELATION_N} runs" in fig.layout.title.text
    assert not [t for t in fig.data if (t.meta or {}).get("fit")]
    assert sum(len(t.x) for t in fig.data if t.x is not None and t.x[0] is not None) == 3
    same = few.assign(aog=0.02)
    fig = drift_vs_ood_figure(results=same, min_n=3)
    assert "correlation not defined" in fig.layout.title.text
    assert not [t for t in fig.data if (t.meta or {}).get("fit")]
    with pytest.raises(ValueError, match="min_n"):
        drift_vs_ood_figure(results=few, min_n=2)


# --------------------------------------------------------------------------- labels


def test_label_histogram_of_teacher_probabilities(sweep, results):
    rid = run_of(results, "teacher")
    margin = pd.read_parquet(sweep / "runs" / rid / "labels.parquet")["margin"].to_numpy()
    fig = label_confidence_figure(sweep / "runs" / rid)
    np.testing.assert_allclose(fig.data[0].x, 1 / (1 + np.exp(-margin)))
    assert fig.layout.meta["q_mean"] == pytest.approx(float(np.mean(1 / (1 + np.exp(-margin)))))
    assert fig.layout.xaxis.title.text.startswith("soft label q")


def test_uninformative_labels_are_flagged():
    q = pd.DataFrame({"pair_id": range(200), "q": np.random.default_rng(0).uniform(0.48, 0.53, 200)})
    fig = label_confidence_figure(labels=q)
    assert fig.layout.meta["uninformative"]
    assert "nearly uninformative" in fig.layout.title.text and "mean q 0.50" in fig.layout.title.text
    sharp = label_confidence_figure(labels=q.assign(q=np.where(q["q"] > 0.5, 0.95, 0.05)))
    assert not sharp.layout.meta["uninformative"]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        label_confidence_figure(labels=q.assign(q=q["q"] + 1))
    with pytest.raises(ValueError, match="neither 'q' nor 'margin'"):
        label_confidence_figure(labels=q.rename(columns={"q": "p"}))


# --------------------------------------------------------------------------- export


def test_export_html_is_standalone_and_holds_the_data(sweep, tmp_path):
    fig = accuracy_figure(sweep)
    out = export_figure(fig, tmp_path / "sub" / "acc.html")
    text = out.read_text(encoding="utf-8")
    assert 'src="https://cdn.plot.ly' not in text and len(text) > 1_000_000  # plotly.js inline
    assert "weak teacher (gold labels)" in text
    y = json.loads(fig.to_json())["data"][0]["y"]
    assert (y["bdata"] if isinstance(y, dict) else str(y[0])[:5]) in text


def test_export_falls_back_to_html_without_a_browser(sweep, tmp_path, monkeypatch, caplog):
    fig = transfer_figure(sweep)

    def no_browser(*args, **kwargs):
        raise RuntimeError("Kaleido requires Google Chrome to be installed.")

    monkeypatch.setattr(type(fig), "write_image", no_browser)
    with caplog.at_level(logging.WARNING, logger="anchorviz.viz"):
        out = export_figure(fig, tmp_path / "tr.png")
    assert out == tmp_path / "tr.html" and out.is_file()
    assert "apt-get install chromium" in caplog.text and "tr.html" in caplog.text
    with pytest.raises(ExportError, match="requires Google Chrome"):
        export_figure(fig, tmp_path / "tr.svg", fallback=False)
    with pytest.raises(ValueError, match="unknown suffix '.gif'"):
        export_figure(fig, tmp_path / "tr.gif")


def _has_browser() -> bool:
    return any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome"))


@pytest.mark.skipif(not _has_browser(), reason="static export needs a Chrome/Chromium browser")
def test_export_svg_with_kaleido(sweep, tmp_path):
    out = export_figure(label_confidence_figure(
        labels=pd.DataFrame({"q": [0.2, 0.6, 0.7, 0.9]})), tmp_path / "q.svg", fallback=False)
    assert out.suffix == ".svg" and out.read_text()[:200].lstrip().startswith("<svg")
    assert math.isfinite(out.stat().st_size) and out.stat().st_size > 1000


# --------------------------------------------------------------------------- plots: bad input


def test_plots_name_missing_directories_and_tables(tmp_path: Path) -> None:
    missing = tmp_path / "no-sweep"
    with pytest.raises(FileNotFoundError, match=rf"sweep directory {re.escape(str(missing))} "
                                                "does not exist"):
        load_results(missing)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        accuracy_figure(missing)
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"no results table .*the sweep may still be running"):
        load_results(empty)
    with pytest.raises(FileNotFoundError, match="run directory .* does not exist"):
        load_run_table(empty / "runs" / "naive-x", "scores")
    (empty / "runs" / "naive-x").mkdir()
    with pytest.raises(FileNotFoundError, match=r"drift\.parquet does not exist"):
        load_run_table(empty / "runs" / "naive-x", "drift")
    with pytest.raises(ValueError, match="unknown run table 'bogus'"):
        load_run_table(empty / "runs" / "naive-x", "bogus")
    with pytest.raises(FileNotFoundError, match=r"run 'nope': directory .* does not exist"):
        run_path(empty, "nope")
    (empty / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        load_results(empty / "file")
