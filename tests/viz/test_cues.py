"""Which cues each model follows (`anchorviz.viz.cues.cue_reliance_figure`), its report section,
and the cues block of ``anchorviz analyse``: checked against hand-made blocks and hand-counted
pairs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.viz.common import load_results, method_label
from anchorviz.viz.cues import cue_reliance_figure, cue_value

SPLITS = ("source_test", "target_test:amazon", "target_test:nyt", "ood")


def _iv(n: int, point: float | None, lo: float | None, hi: float | None) -> dict:
    return {"n": n, "point": point, "lo": lo, "hi": hi}


def _entry(dis: tuple[float, float, float], n_dis: int, follow: tuple[float, float, float],
           n: int, with_disagree: bool = True) -> dict:
    """One cue's entry as `results.cue_block` stores it (agree accuracy is not drawn)."""
    e = {"n": n, "agree": _iv(n - n_dis, 0.9, 0.8, 0.95), "follow": _iv(n, *follow),
         "interval": "cluster"}
    if with_disagree:
        e["disagree"] = _iv(n_dis, *dis)
    return e


def _write_blocks(sweep: Path, blocks: dict[str, dict]) -> None:
    for run_id, block in blocks.items():
        path = sweep / "runs" / run_id / "metrics.json"
        m = json.loads(path.read_text())
        m["cues"] = block
        path.write_text(json.dumps(m))


def _traces(fig, label: str) -> dict[str, object]:
    """The bar traces of one method group, by panel split."""
    return {t.meta["split"]: t for t in fig.data if t.name == label}


# hand-made numbers per method: (disagree accuracy, lo, hi) of the length cue, and its overall
# follow rate (point, lo, hi); the refusal cue disagrees with the label on 4 pairs only
HAND = {
    "teacher": ((0.25, 0.10, 0.45), (0.60, 0.50, 0.70)),
    "naive": ((0.10, 0.05, 0.20), (0.80, 0.72, 0.86)),
    "anchor": ((0.40, 0.30, 0.55), (0.55, 0.45, 0.66)),
    "ceiling": ((0.70, 0.60, 0.80), (0.35, 0.28, 0.41)),
}


def _one_seed_sweep(tmp_path: Path, with_disagree: bool = True) -> Path:
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), methods=("naive", "anchor"),
                             lambdas=(0.1,), layers=("last",))
    res = load_results(sweep)
    blocks = {}
    for r in res.itertuples(index=False):
        dis, fol = HAND[r.method]
        blocks[r.run_id] = {s: {
            "length": _entry(dis, 30, fol, 70, with_disagree),
            "refusal": _entry((0.5, 0.2, 0.8), 4, (0.5, 0.3, 0.7), 12, with_disagree),
            "format": _entry((None, None, None), 0, (None, None, None), 0, with_disagree),
        } for s in SPLITS}
    _write_blocks(sweep, blocks)
    return sweep


def test_bars_are_the_follow_rate_where_the_cue_disagrees(tmp_path: Path) -> None:
    sweep = _one_seed_sweep(tmp_path)
    res = load_results(sweep)
    fig = cue_reliance_figure(sweep, results=res)
    # one panel per target, in the sweep's order
    assert [a.text for a in fig.layout.annotations[:2]] == ["target amazon", "target nyt"]
    # (bar, error up, error down) in percent: 100 * (1 - acc), 100 * (acc - lo), 100 * (hi - acc)
    want = {"teacher": (75.0, 15.0, 20.0), "naive": (90.0, 5.0, 10.0),
            "anchor": (60.0, 10.0, 15.0), "ceiling": (30.0, 10.0, 10.0)}
    for method, (bar, up, down) in want.items():
        label = method_label(method, 0.1 if method == "anchor" else 0.0,
                             "last" if method == "anchor" else "")
        traces = _traces(fig, label)
        assert set(traces) == {"target_test:amazon", "target_test:nyt"}
        for tr in traces.values():
            assert list(tr.x) == ["length", "refusal"]  # format never disagrees: left out
            assert tr.y[0] == pytest.approx(bar)
            assert tr.error_y.array[0] == pytest.approx(up)
            assert tr.error_y.arrayminus[0] == pytest.approx(down)
            # refusal disagrees with the label on 4 pairs: marked, drawn faded and hatched
            assert tr.meta["tiny"] == [False, True] and tr.meta["pairs"] == [30, 4]
            assert list(tr.marker.opacity) == [1.0, pytest.approx(0.3)]
            assert list(tr.marker.pattern.shape) == ["", "/"]
    title = fig.layout.title.text
    assert "disagrees with the label" in title and "REJECTED" in title
    assert "fewer than 10 pairs" in title and "refusal (target amazon, target nyt)" in title
    assert "not shown" in title and "format" in title


def test_overall_follow_rate_on_request_and_as_the_fallback(tmp_path: Path) -> None:
    sweep = _one_seed_sweep(tmp_path)
    fig = cue_reliance_figure(sweep, on="all", split="source")
    naive = _traces(fig, method_label("naive"))["source_test"]
    assert naive.y[0] == pytest.approx(80.0)  # the stored follow point, x100
    assert naive.error_y.array[0] == pytest.approx(6.0)
    assert naive.error_y.arrayminus[0] == pytest.approx(8.0)
    assert naive.meta["pairs"] == [70, 12]  # every pair where the cue picks a side: not tiny
    assert "overall follow rate" in fig.layout.title.text

    old = _one_seed_sweep(tmp_path / "old", with_disagree=False)  # blocks without the slice
    fig = cue_reliance_figure(old)
    ceiling = _traces(fig, method_label("ceiling"))["target_test:nyt"]
    assert ceiling.y[0] == pytest.approx(35.0)
    assert "overall follow rate" in fig.layout.title.text
    assert "no disagree slice" in fig.layout.title.text


def test_several_seeds_average_and_the_smallest_slice_decides(tmp_path: Path) -> None:
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1), methods=("naive",), lambdas=(),
                             layers=())
    res = load_results(sweep)
    blocks = {}
    for r in res.itertuples(index=False):
        acc, n = (0.2, 30) if r.seed == 0 else (0.4, 8)  # follows 80% and 60%
        blocks[r.run_id] = {s: {"length": _entry((acc, acc - 0.1, acc + 0.1), n,
                                                 (0.5, 0.4, 0.6), 40)} for s in SPLITS}
    _write_blocks(sweep, blocks)
    fig = cue_reliance_figure(sweep, split="amazon")
    tr = _traces(fig, method_label("naive"))["target_test:amazon"]
    assert tr.y[0] == pytest.approx(70.0)  # mean over the two seeds
    # two seeds: the range over seeds, 60 to 80
    assert tr.error_y.array[0] == pytest.approx(10.0)
    assert tr.error_y.arrayminus[0] == pytest.approx(10.0)
    assert tr.meta["pairs"] == [8] and tr.meta["tiny"] == [True]  # seed 1 has 8 pairs
    assert "mean over 2 seeds" in fig.layout.title.text


def test_cue_value_maps_the_disagree_interval() -> None:
    block = {"ood": {"echo": _entry((0.3, 0.2, 0.45), 20, (0.6, 0.5, 0.7), 50)}}
    v = cue_value(block, "ood", "echo")
    assert (v["point"], v["lo"], v["hi"], v["n"]) == (pytest.approx(0.7), pytest.approx(0.55),
                                                      pytest.approx(0.8), 20)
    assert cue_value(block, "ood", "echo", on="all")["point"] == 0.6
    assert cue_value(block, "source_test", "echo") is None
    with pytest.raises(ValueError, match="on must be"):
        cue_value(block, "ood", "echo", on="agree")


def test_no_blocks_and_unknown_choices_are_errors(tmp_path: Path) -> None:
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), methods=("naive",), lambdas=(),
                             layers=())
    with pytest.raises(ValueError, match="no run of this condition"):
        cue_reliance_figure(sweep)  # fake runs cannot be rebuilt either: left out, said so
    sweep = _one_seed_sweep(tmp_path / "b")
    with pytest.raises(ValueError, match="choose from"):
        cue_reliance_figure(sweep, split="books")
    with pytest.raises(ValueError, match="not in the runs' cues blocks"):
        cue_reliance_figure(sweep, cue="marker")


def test_report_has_the_section_only_with_blocks(tmp_path: Path) -> None:
    from anchorviz.viz.report import write_report

    title = "Which cues each model follows, per target"
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), methods=("naive",), lambdas=(),
                             layers=())
    assert title not in write_report(sweep).read_text()
    res = load_results(sweep)
    _write_blocks(sweep, {r: {s: {"length": _entry((0.2, 0.1, 0.3), 30, (0.7, 0.6, 0.8), 60)}
                              for s in SPLITS} for r in res["run_id"]})
    html = write_report(sweep).read_text()
    assert f"<h2>{title}</h2>" in html
    after = html.split(f"<h2>{title}</h2>")[1][:400]
    assert "not available" not in after and "plotly-graph-div" in after


def test_analyse_stores_and_prints_the_cues_block(tmp_path: Path) -> None:
    """A tiny BERT reward model analysed on pairs whose cues are counted by hand: the length
    cue favours the chosen side on 4 source pairs and the rejected side on 4; on the target the
    rejected side refuses on 3 pairs."""
    import torch
    from builders import word_tokenizer
    from transformers import BertConfig, BertForSequenceClassification

    from anchorviz.pipeline.analyse import analyse, summary_lines

    long = " really really really really really really"
    data = tmp_path / "data"
    data.mkdir()
    src, tgt = data / "src.jsonl", data / "tgt.jsonl"
    with open(src, "w") as f:
        for i in range(12):
            c, r = "the movie was good", "the movie was bad"
            c, r = (c + long, r) if i % 3 == 0 else (c, r + long) if i % 3 == 1 else (c, r)
            f.write(json.dumps({"prompt": f"the movie {i}", "chosen": c, "rejected": r}) + "\n")
    with open(tgt, "w") as f:
        for i in range(9):
            r = "I cannot help with that" if i < 3 else "the story was boring"
            f.write(json.dumps({"prompt": f"the story {i}", "chosen": "the story was fun",
                                "rejected": r}) + "\n")
    tok = word_tokenizer("encoder")
    torch.manual_seed(0)
    rm = BertForSequenceClassification(BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, num_labels=1))
    ckpt, base = tmp_path / "rm", tmp_path / "base"
    rm.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    rm.bert.save_pretrained(base)
    tok.save_pretrained(base)
    res = analyse(str(ckpt), str(base), str(src), [f"books={tgt}"], [], tmp_path / "an",
                  pairs=20, max_length=24, projection="none", n_boot=50)
    stored = json.loads((res.run_dir / "metrics.json").read_text())["cues"]
    assert stored == res.metrics["cues"]
    assert set(stored) == {"source_test", "target_test:books", "ood"}
    length = stored["source_test"]["length"]
    assert (length["n"], length["agree"]["n"], length["disagree"]["n"]) == (8, 4, 4)
    follow = (4 * length["agree"]["point"] + 4 * (1 - length["disagree"]["point"])) / 8
    assert length["follow"]["point"] == pytest.approx(follow)
    refusal = stored["target_test:books"]["refusal"]
    assert (refusal["n"], refusal["disagree"]["n"]) == (3, 3)
    assert stored["ood"]["refusal"]["n"] == 3 and stored["source_test"]["refusal"]["n"] == 0
    text = "\n".join(summary_lines(res))
    assert "Surface cues" in text
    (line,) = [x for x in text.splitlines() if x.strip().startswith("length")]
    assert f"{100 * (1 - length['disagree']['point']):5.1f}" in line and "n=4" in line
    # the results table reads it as a trained run's
    row = res.results[res.results["run_id"] == res.run_id].iloc[0]
    assert row["follow_length_source"] == pytest.approx(length["follow"]["point"])
    assert np.isfinite(row["follow_refusal_target"])
    from anchorviz.viz.report import write_report

    html = write_report(tmp_path / "an").read_text()
    after = html.split("<h2>Which cues each model follows, per target</h2>")[1][:400]
    assert "not available" not in after
