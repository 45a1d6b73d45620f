"""The explorer shows the stored numbers of the selected run; the launcher reports, never raises."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.viz.selection import lambda_label, select_run
from anchorviz.viz.widgets import RunLauncher, SweepExplorer


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return write_fake_sweep(tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="module")
def results(sweep) -> pd.DataFrame:
    return pd.read_parquet(sweep / "results.parquet")


@pytest.fixture(scope="module")
def explorer(sweep) -> SweepExplorer:
    return SweepExplorer(sweep)


def drift_trace(fig, who: str, domain: str, metric: str):
    (tr,) = [t for t in fig.data if t.meta == {"who": who, "domain": domain, "metric": metric}]
    return tr


# --------------------------------------------------------------------------- select_run


def test_select_run_matches_the_results_row(results):
    rid = select_run(results, method="anchor", lambda_=0.1, layers="middle", seed=1)
    row = results[results["run_id"] == rid].iloc[0]
    assert (row["method"], row["anchor_lambda"], row["anchor_layers"], row["seed"]) == (
        "anchor", 0.1, "middle", 1)
    # lambda / layers are ignored for methods that are not anchored; seed None = smallest seed
    naive = select_run(results, method="naive", lambda_=1.0, layers="last")
    assert results.set_index("run_id").loc[naive, "seed"] == 0
    assert select_run(results, method="anchor", lambda_=1 / 10, layers="last", seed=0) == \
        select_run(results, method="anchor", lambda_=0.1, layers="last", seed=0)


def test_select_run_explains_what_does_not_match(results):
    with pytest.raises(ValueError, match=r"no run matches .*lambda_=0\.5.*\[0\.01, 0\.1, 1\.0\]"):
        select_run(results, method="anchor", lambda_=0.5, layers="last")
    with pytest.raises(ValueError, match=r"method 'seam' is not in the sweep.*'naive'"):
        select_run(results, method="seam")
    with pytest.raises(ValueError, match="pass lambda_="):
        select_run(results, method="anchor", layers="last")
    with pytest.raises(ValueError, match=r"layers values for this selection: \['last', 'middle'\]"):
        select_run(results, method="anchor", lambda_=0.1, layers="3,5")
    with pytest.raises(ValueError, match=r"seed values.*\[0, 1\]"):
        select_run(results, method="naive", seed=7)


def test_lambda_labels():
    assert [lambda_label(v) for v in (1e-4, 0.01, 0.5, 1.0, 0.0)] == ["1e-4", "0.01", "0.5", "1", "0"]


# --------------------------------------------------------------------------- explorer


def test_update_moves_the_stored_numbers_into_the_panels(explorer, sweep, results):
    figs_before = dict(explorer.figures)
    n_traces = {k: len(f.data) for k, f in explorer.figures.items()}
    rid = explorer.update(method="anchor", lambda_=1.0, layer="middle", target="nyt", seed=1)
    assert rid == select_run(results, method="anchor", lambda_=1.0, layers="middle", seed=1)
    assert explorer.run_id == rid
    # figures are updated in place, never re-created
    assert all(explorer.figures[k] is figs_before[k] for k in figs_before)
    assert {k: len(f.data) for k, f in explorer.figures.items()} == n_traces

    drift = pd.read_parquet(sweep / "runs" / rid / "drift.parquet")
    fig = explorer.figures["drift"]
    for domain, split in (("source", "source_test"), ("target", "target_test:nyt")):
        want = drift[drift["split"] == split].sort_values("layer")
        np.testing.assert_allclose(drift_trace(fig, "selected", domain, "cka").y, want["cka"])
        np.testing.assert_allclose(drift_trace(fig, "selected", domain, "cosine").y,
                                   want["cosine_mean"])
    naive = select_run(results, method="naive", seed=1)
    ndrift = pd.read_parquet(sweep / "runs" / naive / "drift.parquet")
    np.testing.assert_allclose(drift_trace(fig, "naive", "target", "cka").y,
                               ndrift[ndrift["split"] == "target_test:nyt"].sort_values("layer")["cka"])

    proj = pd.read_parquet(sweep / "runs" / rid / "projection.parquet")
    last = proj[proj["layer"] == proj["layer"].max()]
    umap = explorer.figures["umap"]
    (stu_src,) = [t for t in umap.data if t.meta == {"model": "student", "slot": 0}]
    (ref_tgt,) = [t for t in umap.data if t.meta == {"model": "reference", "slot": 1}]
    want = last[(last["model"] == "student") & (last["split"] == "source_test")]
    np.testing.assert_allclose(stu_src.x, want["x"])
    np.testing.assert_allclose(stu_src.y, want["y"])
    want = last[(last["model"] == "reference") & (last["split"] == "target_test:nyt")]
    np.testing.assert_allclose(ref_tgt.x, want["x"])

    acc = explorer.figures["accuracy"]
    (ood,) = [t for t in acc.data if t.meta["column"] == "ood"]
    label = "ANCHOR λ=1 (middle layers)"
    i = list(ood.x).index(label)
    rows = results[(results["method"] == "anchor") & np.isclose(results["anchor_lambda"], 1.0)
                   & (results["anchor_layers"] == "middle")]
    assert ood.y[i] == pytest.approx(100 * rows["acc_nyt"].mean())
    assert ood.marker.opacity[i] == 1.0 and min(ood.marker.opacity) < 1.0
    assert label in explorer.status.value and rid in explorer.status.value


def test_colour_by_side_and_map_layer(explorer, sweep, results):
    rid = explorer.update(method="naive", color_by="side", view_layer=3, target="amazon", seed=0)
    proj = pd.read_parquet(sweep / "runs" / rid / "projection.parquet")
    (chosen,) = [t for t in explorer.figures["umap"].data
                 if t.meta == {"model": "student", "slot": 0}]
    want = proj[(proj["layer"] == 3) & (proj["model"] == "student") & (proj["side"] == "chosen")
                & proj["split"].isin(["source_test", "target_test:amazon"])]
    np.testing.assert_allclose(np.sort(chosen.x), np.sort(want["x"]))
    assert "chosen" in chosen.name and "layer 3" in explorer.figures["umap"].layout.title.text
    assert explorer.lambda_w.disabled and explorer.layer_w.disabled
    # the naive student is not drawn twice as its own reference
    assert not drift_trace(explorer.figures["drift"], "naive", "source", "cka").visible
    explorer.update(color_by="domain", view_layer=6)
    with pytest.raises(ValueError, match=r"view_layer=4.*\[3, 6\]"):
        explorer.update(view_layer=4)


def test_controls_drive_the_same_redraw(explorer, results):
    explorer.update(method="anchor", lambda_=0.01, layer="last", seed=0)
    explorer.lambda_w.value = 0.1  # what moving the slider does
    assert explorer.run_id == select_run(results, method="anchor", lambda_=0.1, layers="last",
                                         seed=0)
    assert [lab for lab, _ in explorer.lambda_w.options] == ["0.01", "0.1", "1"]


def test_update_rejects_values_the_sweep_lacks(explorer):
    with pytest.raises(ValueError, match=r"lambda_=0\.5 is not in the sweep.*\[0\.01, 0\.1, 1\.0\]"):
        explorer.update(lambda_=0.5)
    with pytest.raises(ValueError, match=r"layer='first'.*\['last', 'middle'\]"):
        explorer.update(layer="first")
    with pytest.raises(ValueError, match=r"target='tweets'.*\['amazon', 'nyt'\]"):
        explorer.update(target="tweets")
    with pytest.raises(ValueError, match="unknown selection key"):
        explorer.update(lam=0.1)


def test_updates_are_fast(explorer):
    explorer.update(method="anchor", lambda_=0.1, layer="last", target="amazon")  # warm caches
    worst: dict[str, float] = {}
    for lam in (0.01, 1.0, 0.1):
        for layer in ("middle", "last"):
            explorer.update(lambda_=lam, layer=layer)
            for k, v in explorer.timings.items():
                worst[k] = max(worst.get(k, 0.0), v)
    # targets: < 100 ms drift / accuracy, < 300 ms map; bounds doubled for a busy CI machine
    assert worst["drift"] < 200 and worst["accuracy"] < 200 and worst["umap"] < 600, worst


def test_artefact_strength_selector(tmp_path):
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), lambdas=(0.1,), layers=("last",),
                             methods=("naive", "anchor"), artifact_strengths=(0.0, 1.0),
                             artifact_kind="marker", projection_layers=(6,), n_pairs=20)
    res = pd.read_parquet(sweep / "results.parquet")
    ex = SweepExplorer(sweep, preload_projections=False)
    assert ex.strength_w.layout.display != "none"
    rid = ex.update(artifact_strength=0.0, method="naive")
    assert res.set_index("run_id").loc[rid, "artifact_strength"] == 0.0
    rid = ex.update(artifact_strength=1.0)
    assert res.set_index("run_id").loc[rid, "artifact_strength"] == 1.0
    (id_bar,) = [t for t in ex.figures["accuracy"].data if t.meta["column"] == "acc_id"]
    naive = res[(res["method"] == "naive") & (res["artifact_strength"] == 1.0)]
    assert id_bar.y[list(id_bar.x).index("naive W2S")] == pytest.approx(100 * naive["acc_id"].iloc[0])


def test_teacher_visibility_slider(tmp_path):
    """Several teacher visibilities of the planted marker: a slider beside lambda and layer
    that picks the condition of every panel; at a visibility where the sweep trained fewer
    methods, moving a control there says so instead of raising into the kernel."""
    sweep = write_fake_sweep(tmp_path / "v", seeds=(0, 1), lambdas=(0.1, 1.0), layers=("last",),
                             methods=("naive", "anchor"), artifact_strengths=(0.8,),
                             artifact_kind="marker", projection_layers=(6,), n_pairs=20,
                             teacher_visibilities=(0.5, 1.0),
                             methods_by_visibility={1.0: ("naive",)})
    res = pd.read_parquet(sweep / "results.parquet")
    assert sorted(res["teacher_visibility"].unique()) == [0.5, 1.0]
    ex = SweepExplorer(sweep, preload_projections=False)
    w = ex.visibility_w
    assert w.layout.display != "none" and [v for _, v in w.options] == [0.5, 1.0]
    assert w.value == 0.5  # the value with the most runs: the sweep's own scenario
    controls = ex.widget.children[1].children[0]  # the column of controls beside the panels
    assert w in controls.children  # with lambda and layer
    assert {ex.lambda_w, ex.layer_w} <= set(controls.children)
    by_id = res.set_index("run_id")

    rid = ex.update(method="anchor", lambda_=1.0, layer="last", seed=1)
    assert by_id.loc[rid, "teacher_visibility"] == 0.5
    assert ex.selection["teacher_visibility"] == 0.5
    assert rid == select_run(res, method="anchor", lambda_=1.0, layers="last", seed=1,
                             artifact_strength=0.8, teacher_visibility=0.5)
    assert "teacher visibility 0.5" in ex.figures["accuracy"].layout.title.text
    assert "50% of the marked source pairs" in ex.status.value
    assert "could not read" in ex.status.value  # the hidden-marker accuracy of the run
    # the accuracy bars are those of this visibility only
    (id_bar,) = [t for t in ex.figures["accuracy"].data if t.meta["column"] == "acc_id"]
    naive = res[(res["method"] == "naive") & (res["teacher_visibility"] == 0.5)]
    assert id_bar.y[list(id_bar.x).index("naive W2S")] == pytest.approx(100 * naive["acc_id"].mean())

    rid = ex.update(method="naive", teacher_visibility=1.0)
    assert by_id.loc[rid, "teacher_visibility"] == 1.0 and by_id.loc[rid, "method"] == "naive"
    naive = res[(res["method"] == "naive") & (res["teacher_visibility"] == 1.0)]
    assert id_bar.y[list(id_bar.x).index("naive W2S")] == pytest.approx(100 * naive["acc_id"].mean())
    assert "could not read" not in ex.status.value  # the teacher read every marker

    # the slider itself: no ANCHOR run at visibility 1 -> said in the status, nothing raised
    ex.update(method="anchor", teacher_visibility=0.5, lambda_=0.1)
    ex.visibility_w.value = 1.0
    assert ex.run_id is None and "No stored run for this selection" in ex.status.value
    ex.visibility_w.value = 0.5
    assert by_id.loc[ex.run_id, "teacher_visibility"] == 0.5
    with pytest.raises(ValueError, match=r"teacher_visibility=0\.25 is not in the sweep.*\[0\.5, 1\.0\]"):
        ex.update(teacher_visibility=0.25)
    with pytest.raises(ValueError, match="pass teacher_visibility="):
        select_run(res, method="naive", artifact_strength=0.8)


def test_one_visibility_hides_the_slider(explorer, results):
    assert "teacher_visibility" in explorer.selection
    assert explorer.visibility_w.layout.display == "none"
    # a results table from before the column existed: every teacher read every marker
    old = results.drop(columns=["teacher_visibility"])
    assert select_run(old, method="naive", seed=1) == select_run(results, method="naive", seed=1)
    assert "teacher visibility" not in explorer.figures["accuracy"].layout.title.text


def test_explorer_bad_sweep(tmp_path, sweep):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SweepExplorer(tmp_path / "missing")
    teachers = tmp_path / "teachers"
    teachers.mkdir()
    res = pd.read_parquet(sweep / "results.parquet")
    res[res["kind"] == "teacher"].to_parquet(teachers / "results.parquet")
    with pytest.raises(ValueError, match="no student or ceiling runs"):
        SweepExplorer(teachers)


def test_figure_widgets_when_anywidget_is_installed(explorer):
    import plotly.graph_objects as go

    try:
        import anywidget  # noqa: F401
    except ImportError:
        assert all(type(f) is go.Figure for f in explorer.figures.values())
        return
    assert all(isinstance(f, go.FigureWidget) for f in explorer.figures.values())
    grid = explorer.widget.children[1].children[1]  # the panels beside the controls
    assert grid.children[0].children == (explorer.figures["drift"],)
    # window resizes redraw the figures at the new width
    assert all(f._config.get("responsive") for f in explorer.figures.values())


# --------------------------------------------------------------------------- fits the screen


def _boxes(widget) -> list:
    """Every box (HBox / VBox / Box) in a widget tree, the root first."""
    import ipywidgets as widgets

    out = [widget] if isinstance(widget, widgets.Box) else []
    for child in getattr(widget, "children", ()):
        out += _boxes(child)
    return out


def test_figures_follow_the_output_area_width(explorer):
    """No fixed pixel width (1240 / 620 px cut the accuracy panel off in a narrow notebook
    column): every figure autosizes to its box and keeps a fixed height."""
    explorer.update(method="anchor", lambda_=0.1, layer="last", target="nyt", seed=0)
    for name, fig in explorer.figures.items():
        assert fig.layout.width is None, (name, fig.layout.width)
        assert fig.layout.autosize is True, name
        assert 300 <= fig.layout.height <= 800, (name, fig.layout.height)
        # horizontal legends, below the plot or above it, never beside it (where a long
        # trace name pushes it past the right edge of a narrow figure)
        assert fig.layout.legend.orientation == "h", name
        assert fig.layout.legend.x in (None, 0), name


def _px(basis: str) -> float:
    value = basis.split()[-1]
    assert value.endswith("px"), basis
    return float(value[:-2])


def test_controls_sit_beside_a_compact_panel_grid(explorer):
    """Issue 41: the controls stay in view of the panels they change at 1280 x 800. A column
    of controls beside a grid of the three panels (drift and accuracy side by side at 1280 px,
    the map after them), in a row that wraps (the grid under the controls, its panels under
    each other, in a narrow output area); panels short enough that the status line, the
    controls and the first row of panels fit an 800 px screen together."""
    import ipywidgets as widgets

    root = explorer.widget
    assert root.layout.width == "100%" and root.layout.max_width
    assert root.children[0] is explorer.status  # above the rows, beside nothing
    (main,) = root.children[1:]
    assert isinstance(main, widgets.HBox) and main.layout.flex_flow == "row wrap"
    assert main.layout.width == "100%"
    controls, grid = main.children
    assert isinstance(controls, widgets.VBox)
    assert set(controls.children) == {explorer.method_w, explorer.lambda_w, explorer.layer_w,
                                      explorer.visibility_w, explorer.target_w,
                                      explorer.seed_w, explorer.strength_w,
                                      explorer.view_layer_w, explorer.color_by_w}
    assert isinstance(grid, widgets.HBox) and grid.layout.flex_flow == "row wrap"
    assert list(grid.children) == [explorer._slots[k].box for k in ("drift", "accuracy", "umap")]
    # plotly draws a panel 700 px wide before it can measure its box, so each panel's basis
    # is at least that: where the output area is narrower than controls + panel, the grid
    # goes under the controls instead of cutting its panels off (tests/test_browser.py)
    assert _px(controls.layout.flex) == 330 and _px(grid.children[0].layout.flex) >= 700
    # the first row of panels under the status line fits 800 px with the browser's chrome
    assert max(explorer.figures[k].layout.height for k in ("drift", "accuracy")) <= 520


def test_rows_and_panels_wrap_in_a_narrow_output_area(explorer):
    import ipywidgets as widgets

    root = explorer.widget
    rows = [b for b in _boxes(root) if isinstance(b, widgets.HBox)]
    assert len(rows) == 2  # controls beside the grid, and the grid of panels
    for row in rows:
        assert row.layout.flex_flow == "row wrap" and row.layout.width == "100%", row.children
    for box in (s.box for s in explorer._slots.values()):  # each may shrink, grows from a basis
        assert box.layout.flex.startswith("1 1 ") and box.layout.min_width == "0"
        assert box.layout.width is None
    # no box anywhere has a fixed pixel width
    for box in _boxes(root):
        assert not str(box.layout.width or "").endswith("px"), box
    # the colour-by buttons are as wide as their labels (fixed 148 px buttons spilled over)
    assert explorer.color_by_w.style.button_width == "auto"


def _explicit_colors(fig) -> list[str]:
    out = []
    for tr in fig.data:
        if isinstance(tr.meta, dict) and tr.meta.get("model") == "movement":
            continue  # the see-through grey movement lines
        line = getattr(tr, "line", None)
        marker = getattr(tr, "marker", None)
        for c in ((line.color if line is not None else None),
                  (marker.color if marker is not None else None)):
            if isinstance(c, str):
                out.append(c.upper())
    return out


def test_colours_are_the_colour_blind_safe_palette(explorer):
    from anchorviz.viz.common import OKABE_ITO, TEMPLATE

    okabe_ito = {c.upper() for c in OKABE_ITO.values()}
    explorer.update(method="anchor", lambda_=0.1, layer="last", target="nyt", seed=0,
                    color_by="side")
    for name, fig in explorer.figures.items():
        colors = _explicit_colors(fig)
        assert colors, name
        assert set(colors) <= okabe_ito, (name, set(colors) - okabe_ito)
        assert list(fig.layout.template.layout.colorway) == list(
            TEMPLATE.layout.colorway), name
    umap = explorer.figures["umap"]
    side = {tr.name.split(" · ")[1]: tr.marker.color.upper() for tr in umap.data
            if isinstance(tr.meta, dict) and tr.meta.get("model") == "student" and tr.visible}
    # chosen / rejected: blue / orange, never a red / green pair
    assert side == {"chosen responses": OKABE_ITO["blue"].upper(),
                    "rejected responses": OKABE_ITO["orange"].upper()}
    drift = explorer.figures["drift"]
    selected = drift_trace(drift, "selected", "source", "cka").line.color
    naive = drift_trace(drift, "naive", "source", "cka").line.color
    assert selected != naive and {selected, naive} <= set(OKABE_ITO.values())
    explorer.update(color_by="domain")


def test_status_shows_the_selected_targets_own_aog(explorer, results):
    """With a target selected, the status line gives that target's AOG (``aog_<target>``), the
    pooled AOG and NTS after it as "over all targets"."""
    rid = explorer.update(method="anchor", lambda_=1.0, layer="middle", target="nyt", seed=1)
    row = results.set_index("run_id").loc[rid]
    teacher = results[(results["kind"] == "teacher") & (results["seed"] == 1)].iloc[0]
    # the column is the student's accuracy on nyt minus its teacher's
    assert row["aog_nyt"] == pytest.approx(row["acc_nyt"] - teacher["acc_nyt"])
    assert row["aog_nyt"] != pytest.approx(row["aog"])  # the pooled value differs
    text = explorer.status_text
    assert (f"WRG {100 * row['wrg']:+.1f}, AOG nyt {100 * row['aog_nyt']:+.1f} points vs "
            "teacher") in text
    assert f"over all targets: AOG {100 * row['aog']:+.1f}, NTS {100 * row['nts']:+.1f}" in text
    explorer.update(target="amazon")
    assert f"AOG amazon {100 * row['aog_amazon']:+.1f} points vs teacher" in explorer.status_text


def test_status_aog_hand_checked_and_pooled_without_target_columns(tmp_path):
    """Hand-set numbers: on tweets the student is 2.3 points below its teacher while the
    pooled AOG is +0.9; runs stored before per-target AOG show the pooled one as before."""
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), lambdas=(0.1,), layers=("last",),
                             methods=("naive", "anchor"), targets=("amazon", "tweets"),
                             projection_layers=(6,), n_pairs=20)
    res = pd.read_parquet(sweep / "results.parquet")
    naive = res["method"] == "naive"
    res.loc[naive, ["wrg", "aog", "nts", "aog_amazon", "aog_tweets"]] = [
        0.07, 0.009, 0.009, 0.041, -0.023]
    res.to_parquet(sweep / "results.parquet")
    ex = SweepExplorer(sweep, preload_projections=False)
    ex.update(method="naive", target="tweets")
    assert "WRG +7.0, AOG tweets -2.3 points vs teacher | over all targets: AOG +0.9, " \
        "NTS +0.9" in ex.status_text
    ex.update(target="amazon")
    assert "AOG amazon +4.1 points vs teacher" in ex.status_text

    res.drop(columns=["aog_amazon", "aog_tweets"]).to_parquet(sweep / "results.parquet")
    old = SweepExplorer(sweep, preload_projections=False)
    old.update(method="naive", target="tweets")
    assert "WRG +7.0, AOG +0.9, NTS +0.9 points vs teacher" in old.status_text
    assert "over all targets" not in old.status_text and "AOG tweets" not in old.status_text
    # and with no target given, the pooled scores
    row = res[naive].iloc[0]
    from anchorviz.viz.explorer_panels import score_parts

    assert score_parts(row, None) == ["WRG +7.0, AOG +0.9, NTS +0.9 points vs teacher"]


def test_status_escapes_values_from_the_sweep(tmp_path):
    """A run id (or target name) with markup in it is shown as text, never as HTML."""
    import shutil

    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), lambdas=(0.1,), layers=("last",),
                             methods=("naive", "anchor"), projection_layers=(6,), n_pairs=20)
    res = pd.read_parquet(sweep / "results.parquet")
    old = str(res.loc[res["method"] == "naive", "run_id"].iloc[0])
    evil = "naive-<script>alert(1)<script>&x"  # no "/": it is a directory name
    shutil.move(sweep / "runs" / old, sweep / "runs" / evil)
    res["run_id"] = res["run_id"].replace(old, evil)
    res.to_parquet(sweep / "results.parquet")
    ex = SweepExplorer(sweep, preload_projections=False)
    assert ex.update(method="naive") == evil
    assert "<script>" not in ex.status.value
    assert "&lt;script&gt;alert(1)&lt;script&gt;&amp;x" in ex.status.value
    assert evil in ex.status_text and "<code>" not in ex.status_text


def test_launcher_status_escapes_error_messages(monkeypatch, tmp_path):
    calls: list = []
    mod = fake_experiment(calls, fail=True)

    def run(cfg, out_dir):
        raise RuntimeError("<script>alert('x')</script> & <b>bold</b>")

    mod.run = run
    use_fake_pipeline(monkeypatch, mod)
    launcher = RunLauncher({"method": {"name": "anchor"}}, out_dir=tmp_path)
    launcher.layers_w.value = "<img src=x onerror=alert(1)>"
    assert launcher.launch() is None
    assert "<script>" not in launcher.status.value and "<b>bold" not in launcher.status.value
    assert "&lt;script&gt;" in launcher.status.value
    assert launcher.status_text == ("failed: RuntimeError: <script>alert('x')</script> & "
                                    "<b>bold</b>")
    # the launcher's own rows wrap as well
    for row in launcher.widget.children[:2]:
        assert row.layout.flex_flow == "row wrap"


# --------------------------------------------------------------------------- launcher


def fake_experiment(calls: list, fail: bool = False) -> types.SimpleNamespace:
    mod = types.SimpleNamespace()

    def config_from_dict(d):
        return dict(d)

    def load_config(path):
        return {"from": str(path)}

    def with_overrides(cfg, **overrides):
        return {**cfg, **overrides}

    def run(cfg, out_dir):
        calls.append((cfg, out_dir))
        if fail:
            raise RuntimeError("teacher labels do not line up")
        return [types.SimpleNamespace(run_id="teacher-1", run_dir=Path(out_dir) / "runs/teacher-1",
                                      kind="teacher", computed=False),
                types.SimpleNamespace(run_id="anchor-1", run_dir=Path(out_dir) / "runs/anchor-1",
                                      kind="student", computed=True)]

    mod.config_from_dict, mod.load_config = config_from_dict, load_config
    mod.with_overrides, mod.run = with_overrides, run
    return mod


def use_fake_pipeline(monkeypatch, mod) -> None:
    """Patch the launcher's config and run functions where it looks them up. Modules that bind
    ``config_from_dict`` at import (anchorviz.sweep_config) are imported first, so a first
    import during the patch never keeps the fake."""
    import anchorviz.pipeline.sweep  # noqa: F401
    import anchorviz.sweep_config  # noqa: F401

    for name in ("config_from_dict", "load_config", "with_overrides"):
        monkeypatch.setattr(f"anchorviz.config.{name}", getattr(mod, name))
    monkeypatch.setattr("anchorviz.pipeline.sweep.run", mod.run)


def test_launcher_runs_the_form_config(monkeypatch, tmp_path):
    calls: list = []
    use_fake_pipeline(monkeypatch, fake_experiment(calls))
    launcher = RunLauncher({"method": {"name": "naive"}, "seed": 3}, out_dir=tmp_path)
    assert launcher.method_w.value == "naive" and launcher.seed_w.value == 3
    assert launcher.lambda_w.disabled
    launcher.method_w.value = "anchor"
    launcher.lambda_w.value = 0.01
    launcher.layers_w.value = "middle"
    launcher.button.click()
    (cfg, out_dir), = calls
    assert cfg["method.name"] == "anchor" and cfg["method.anchor_lambda"] == pytest.approx(0.01)
    assert cfg["method.anchor_layers"] == "middle" and cfg["seed"] == 3
    assert out_dir == str(tmp_path)
    assert "anchor-1" in launcher.status.value and "reused" in launcher.status.value
    assert launcher.progress.bar_style == "success" and launcher.last_error is None
    assert not launcher.button.disabled


def test_launcher_shows_errors_instead_of_raising(monkeypatch, tmp_path):
    calls: list = []
    use_fake_pipeline(monkeypatch, fake_experiment(calls, fail=True))
    launcher = RunLauncher({"method": {"name": "anchor", "anchor_lambda": 0.1}}, out_dir=tmp_path)
    assert launcher.launch() is None
    assert isinstance(launcher.last_error, RuntimeError)
    assert "teacher labels do not line up" in launcher.status.value
    assert launcher.progress.bar_style == "danger"
    assert any("RuntimeError" in o.get("text", "") for o in launcher.output.outputs)


def test_launcher_builds_a_real_run_config(tmp_path):
    pytest.importorskip("torch")
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text("method:\n  name: anchor\n  anchor_lambda: 0.5\nseed: 2\n")
    launcher = RunLauncher(cfg_path)
    assert launcher.lambda_w.value == pytest.approx(0.5) and launcher.seed_w.value == 2
    launcher.layers_w.value = "middle"
    cfg = launcher.config()
    assert (cfg.method.name, cfg.method.anchor_layers, cfg.seed) == ("anchor", "middle", 2)
    assert cfg.method.anchor_lambda == pytest.approx(0.5)
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        RunLauncher(tmp_path / "missing.yaml")
