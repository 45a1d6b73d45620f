"""The report says what to look for: captions, contents, header, a sortable results table, colours
that tell ANCHOR from the ceiling, and maps coloured by the planted marker."""

from __future__ import annotations

import pandas as pd
import pytest

from anchorviz.viz.common import (
    ANCHOR_SCALES,
    METHOD_COLORS,
    MIN_CEILING_DELTA_E,
    _lab,
    color_distance,
    group_table,
)

# --------------------------------------------------------------------------- colours


def _grid(lambdas, layers) -> pd.DataFrame:
    rows = [{"method": "ceiling", "anchor_lambda": 0.0, "anchor_layers": ""},
            {"method": "naive", "anchor_lambda": 0.0, "anchor_layers": ""}]
    rows += [{"method": "anchor", "anchor_lambda": lam, "anchor_layers": lay}
             for lay in layers for lam in lambdas]
    return pd.DataFrame(rows)


def test_color_distance_is_cielab_delta_e():
    assert color_distance("#000000", "#ffffff") == pytest.approx(100, abs=0.01)
    assert color_distance("#0072B2", "rgb(0, 114, 178)") == pytest.approx(0, abs=1e-9)
    assert color_distance("#E69F00", "#56B4E9") > 30


@pytest.mark.parametrize("lambdas", [(10.0,), (0.1, 1.0, 10.0), (0.01, 0.1, 1.0, 10.0, 100.0),
                                     tuple(10.0 ** k for k in range(-3, 4))])
def test_every_anchor_lambda_stays_far_from_the_ceilings_black(lambdas):
    layers = [*ANCHOR_SCALES, "8,10"]  # "8,10": a layer list, the grey ramp
    groups = group_table(_grid(lambdas, layers))
    ceiling = METHOD_COLORS["ceiling"]
    anchor = groups[groups["method"] == "anchor"]
    assert len(anchor) == len(lambdas) * len(layers)
    for row in anchor.itertuples():
        assert color_distance(row.color, ceiling) >= MIN_CEILING_DELTA_E, (
            f"ANCHOR lambda {row.anchor_lambda:g} ({row.anchor_layers}) is {row.color}, "
            f"{color_distance(row.color, ceiling):.1f} from the ceiling's {ceiling}")
    # the ramp still reads: a stronger lambda is a darker shade of its layer choice's hue
    for lay in layers:
        part = anchor[anchor["anchor_layers"] == lay].sort_values("anchor_lambda")
        lightness = [_lab(c)[0] for c in part["color"]]
        assert all(a > b for a, b in zip(lightness, lightness[1:])), (lay, lightness)


# --------------------------------------------------------------------------- drift layout


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from fake_sweep import write_fake_sweep

    return write_fake_sweep(tmp_path_factory.mktemp("sweep"), seeds=(0, 1), lambdas=(0.1, 10.0),
                            layers=("last",), artifact_strengths=(1.0,),
                            artifact_kind="marker", teacher_visibilities=(0.5,))


@pytest.mark.parametrize("metric", ["cka", "cka_debiased", "cosine", "cosine_centred",
                                    "cosine_median", "cosine_p90"])
def test_drift_axis_title_fits_beside_the_plot_not_into_the_title(sweep, metric):
    """A y-axis title is centred on the plot area; longer than it, it runs up into the figure
    title (the centred-drift figure did). ~8 px per character at plotly's 14 px axis font."""
    from anchorviz.viz.drift import DRIFT_METRICS, drift_by_layer_figure

    fig = drift_by_layer_figure(sweep, metric=metric)
    lay = fig.layout
    plot_height = lay.height - lay.margin.t - lay.margin.b
    title = lay.yaxis.title.text
    assert 8 * len(title) < 0.9 * plot_height, (title, plot_height)
    assert f"y: {DRIFT_METRICS[metric][1]}" in lay.title.text  # the full name is still said


# --------------------------------------------------------------------------- the map and the marker


def _mark_scores(run_dir) -> pd.DataFrame:
    """Give a fake run's scores.parquet the columns the pipeline writes (artifact_side,
    artifact_seen): on the source split, pairs 0-9 clean, even ones from 10 marked and read by
    the teacher, odd ones marked and hidden; targets clean. Returns the table."""
    import numpy as np

    path = run_dir / "scores.parquet"
    scores = pd.read_parquet(path)
    idx = scores["pair_id"].str.rsplit("-", n=1).str[-1].astype(int)
    src = scores["split"] == "source_test"
    marked = src & (idx >= 10)
    scores["artifact_side"] = np.where(marked, np.where(idx % 3 == 0, "rejected", "chosen"), None)
    scores["artifact_seen"] = pd.array([bool(i % 2 == 0) if m else None
                                        for i, m in zip(idx, marked)], dtype="boolean")
    scores.to_parquet(path)
    return scores


def _student_dir(sweep, method="naive"):
    res = pd.read_parquet(sweep / "results.parquet")
    return sweep / "runs" / res.loc[res["method"] == method, "run_id"].iloc[0]


def test_umap_colours_by_the_planted_marker(sweep):
    from anchorviz.viz.projection import ARTIFACT_GROUPS, umap_figure

    run = _student_dir(sweep)
    scores = _mark_scores(run)
    fig = umap_figure(run, color_by="artifact")
    proj = pd.read_parquet(run / "projection.parquet")
    proj = proj[proj["layer"] == proj["layer"].max()]
    src = scores[scores["split"] == "source_test"]
    want = {"clean": set(scores.loc[scores["artifact_side"].isna(), "pair_id"]),
            "seen": set(src.loc[src["artifact_seen"].eq(True).fillna(False), "pair_id"]),
            "hidden": set(src.loc[src["artifact_seen"].eq(False).fillna(False), "pair_id"])}
    assert want["seen"] and want["hidden"]
    for key, pairs in want.items():
        label, color = ARTIFACT_GROUPS[key]
        for model in ("reference", "student"):
            (tr,) = [t for t in fig.data if (t.meta or {}).get("group") == label
                     and t.meta.get("model") == model]
            assert tr.marker.color == color
            got = {row[0] for row in tr.customdata}
            # both responses of every pair of the group, at the projection's coordinates
            assert got == pairs & set(proj["pair_id"])
            assert len(tr.x) == 2 * len(got)
            mine = proj[(proj["model"] == model) & proj["pair_id"].isin(pairs)]
            assert sorted(tr.x) == pytest.approx(sorted(mine["x"]))
    colors = [ARTIFACT_GROUPS[k][1] for k in ("clean", "seen", "hidden")]
    assert len(set(colors)) == 3


def test_umap_artifact_colouring_without_the_columns_says_why(sweep):
    from anchorviz.viz.projection import umap_figure

    run = _student_dir(sweep, "confidence")  # its scores.parquet is as an older run's
    with pytest.raises(ValueError, match="artifact_side"):
        umap_figure(run, color_by="artifact")
    with pytest.raises(ValueError, match="color_by must be one of"):
        umap_figure(run, color_by="marker")


def test_umap_hover_shows_the_stored_text_and_the_pair_id_for_older_runs(sweep, tmp_path):
    from anchorviz.viz.projection import umap_figure

    proj = pd.read_parquet(_student_dir(sweep) / "projection.parquet")
    old = umap_figure(projection=proj)
    pts = [t for t in old.data if (t.meta or {}).get("model") in ("reference", "student")]
    assert all(row[3] == "" for t in pts for row in t.customdata)  # no text: pair id only
    assert all("%{customdata[0]}" in t.hovertemplate for t in pts)
    proj = proj.assign(text=[f"<b>response {p} {s}" for p, s in zip(proj["pair_id"],
                                                                      proj["side"])])
    fig = umap_figure(projection=proj)
    pts = [t for t in fig.data if (t.meta or {}).get("model") in ("reference", "student")]
    for t in pts:
        assert "%{customdata[3]}" in t.hovertemplate
        for pair, side, _dom, text in t.customdata:
            assert text == f"<br>“&lt;b&gt;response {pair} {side}”"  # escaped, not markup


def test_projection_frame_stores_the_start_of_each_response():
    import numpy as np

    from anchorviz.pipeline.steps import PROJECTION_TEXT_CHARS, projection_frame

    class Cap:
        pair_ids = np.array(["a", "b"])
        side = np.array([0, 1, 0, 1])

    data = {"source_test": pd.DataFrame({
        "pair_id": ["b", "a"], "prompt": ["p", "p"], "domain": ["movie", "movie"],
        "chosen": ["short b", "x" * 500], "rejected": ["bad b", "bad a"]})}
    xy = np.arange(8, dtype=float).reshape(4, 2)
    out = projection_frame({"source_test": Cap()}, data, 6, xy, xy + 1)
    assert len(out) == 8
    ref = out[out["model"] == "reference"]
    assert list(ref["text"]) == ["x" * PROJECTION_TEXT_CHARS, "bad a", "short b", "bad b"]
    assert list(ref["side"]) == ["chosen", "rejected", "chosen", "rejected"]


# --------------------------------------------------------------------------- the report


@pytest.fixture(scope="module")
def page(sweep, tmp_path_factory) -> str:
    from anchorviz.viz.report import write_report

    path = write_report(sweep, tmp_path_factory.mktemp("report") / "report.html")
    return path.read_text(encoding="utf-8")


def _sections(page: str) -> list[tuple[str, str, str]]:
    """(id, title, body) of every figure section."""
    import html
    import re

    return [(a, html.unescape(t), body) for a, t, body in re.findall(
        r"<section id='(fig-[\w-]+)'><h2>(.*?)</h2>(.*?)</section>", page, flags=re.S)]


def test_every_figure_says_what_to_look_for_right_under_it(sweep, page):
    import html

    from anchorviz.viz.common import load_results
    from anchorviz.viz.report import FIGURE_CAPTIONS, _figures, figure_caption_for

    titles = [t for t, _ in _figures(sweep, load_results(sweep))]
    sections = _sections(page)
    assert [t for _, t, _ in sections] == titles
    drawn = [(t, body) for _, t, body in sections if "plotly-graph-div" in body]
    assert len(drawn) >= 6
    for title, body in drawn:
        caption = figure_caption_for(title)
        assert caption, f"no caption for figure {title!r}"
        tail = body[body.rindex("plotly-graph-div"):]  # the caption comes after the plot
        assert f"<p class='caption'>{html.escape(caption)}</p>" in tail, title
    shortcut = figure_caption_for(
        "Shortcut or skill: ID accuracy on pairs with and without the artefact")
    assert "the gap between the bars is the shortcut" in shortcut.lower()
    # titles that name a metric or a run find their line too; unknown titles get none
    assert figure_caption_for("Representation drift by layer: linear CKA") == \
        FIGURE_CAPTIONS["Representation drift by layer"]
    assert figure_caption_for("Shared PCA of reference and student states: naive W2S student")
    assert figure_caption_for("something else") is None


def test_contents_link_to_every_section_and_every_link_resolves(page):
    import re

    nav = re.search(r"<nav class='toc' id='contents'>(.*?)</nav>", page, flags=re.S)
    assert nav and page.index("id='contents'") < page.index("id='scenario'")
    links = re.findall(r"href='#([^']+)'", nav.group(1))
    ids = re.findall(r"""\bid=['"]([^'"]+)['"]""", page)
    assert len(ids) == len(set(ids)), "duplicate ids"
    assert set(links) <= set(ids), set(links) - set(ids)
    for needed in ("scenario", "verdict", "results"):
        assert needed in links
    assert [a for a, _, _ in _sections(page)] == [a for a in links if a.startswith("fig-")]


def test_header_names_the_version_the_date_and_what_made_the_folder(sweep, page):
    import datetime
    import re

    import anchorviz
    from anchorviz.viz.report import made_by

    header = re.search(r"<p class='meta' id='header'>(.*?)</p>", page, flags=re.S).group(1)
    assert f"anchorviz {anchorviz.__version__}" in header
    assert datetime.date.today().isoformat() in header
    assert "sweep.yaml" in header and "lambdas 0.1, 10" in header and "seeds 0, 1" in header
    assert page.index("id='header'") < page.index("id='contents'")
    (sweep / "sweep.yaml").rename(sweep / "sweep.yaml.bak")
    try:
        assert "runs/<id>/config.yaml" in made_by(sweep)
    finally:
        (sweep / "sweep.yaml.bak").rename(sweep / "sweep.yaml")


def _table(page: str) -> tuple[list[str], list[list[str]]]:
    import html
    import re

    table = page[page.index("<table class='results'>"):]
    table = table[:table.index("</table>")]
    head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    rows = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r)]
            for r in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    return head, rows


def test_results_table_has_wrg_minus_aog_in_points(sweep, page):
    from anchorviz.viz.common import load_results, method_label

    head, rows = _table(page)
    col = head.index("WRG - AOG")
    assert head.index("WRG") < head.index("AOG") < col
    res = load_results(sweep)
    want = {}
    for r in res.itertuples():
        gap = r.wrg - r.aog
        want[(method_label(r.method, r.anchor_lambda, r.anchor_layers), str(r.seed))] = (
            "–" if pd.isna(gap) else f"{round(100 * gap, 1) + 0.0:+.1f}")
    assert len(rows) == len(res) == len(want)
    for row in rows:
        assert row[col] == want[(row[0], row[1])], row
    assert sum(row[col] != "–" for row in rows) == res["wrg"].notna().sum() > 0


def test_the_results_table_sorts_on_a_click_offline(page, tmp_path):
    """The inline script (no external library) sorts the rows by the clicked column, numbers as
    numbers and '–' last; a second click reverses. Run in node against a minimal DOM."""
    import json
    import re
    import shutil
    import subprocess

    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S)
    assert not any("src=" in attrs for attrs, _ in scripts)  # nothing fetched: works offline
    (sort_js,) = [body for _, body in scripts if "table.results" in body]
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the sort script is not run")
    head, rows = _table(page)
    col = head.index("WRG - AOG")
    shim = """
const rows = ROWS.map(cells => ({cells: cells.map(t => ({textContent: t}))}));
const body = {rows: rows.slice(), appendChild(r) {
  this.rows.splice(this.rows.indexOf(r), 1); this.rows.push(r); }};
const ths = HEAD.map((h, i) => ({cellIndex: i, style: {}, attrs: {}, handlers: [],
  addEventListener(e, f) { this.handlers.push(f); }, getAttribute(k) { return this.attrs[k]; },
  setAttribute(k, v) { this.attrs[k] = v; }, removeAttribute(k) { delete this.attrs[k]; }}));
const table = {tBodies: [body], querySelectorAll: () => ths};
global.document = {querySelectorAll: () => [table]};
SCRIPT
const out = [];
for (const c of [COL, COL, 0]) { ths[c].handlers[0](); out.push(body.rows.map(r => r.cells[c].textContent)); }
console.log(JSON.stringify(out));
""".replace("ROWS", json.dumps(rows)).replace("HEAD", json.dumps(head)).replace(
        "COL", str(col)).replace("SCRIPT", sort_js)
    (tmp_path / "sort.js").write_text(shim, encoding="utf-8")
    up, down, by_name = json.loads(subprocess.run([node, str(tmp_path / "sort.js")], check=True,
                                                  capture_output=True, text=True).stdout)
    nums = [float(v) for v in up if v != "–"]
    assert nums == sorted(nums) and up[len(nums):] == ["–"] * (len(up) - len(nums))
    nums_down = [float(v) for v in down if v != "–"]
    assert nums_down == sorted(nums, reverse=True) and down[-1] == "–"
    assert by_name == sorted(by_name)
