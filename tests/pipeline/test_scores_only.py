"""What makes the 5-seed demo cheap without changing what it reports: verdict-only seeds are
scored without a hidden-state capture (the same scores), and the attention kernel is a setting
(``models.attention``) whose default leaves every run id as it was."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from tiny_project import save_tiny_model, tiny_config

from anchorviz.config import ConfigError, with_overrides
from anchorviz.pipeline.keys import reference_key, run_id_for, student_key, teacher_key
from anchorviz.pipeline.runner import build_graph
from anchorviz.sweep_config import SweepConfig, expand_sweep


def _sweep(tmp_path, detail=(0,)) -> SweepConfig:
    return SweepConfig(base=tiny_config(tmp_path), methods=["naive", "anchor"],
                       anchor_lambdas=[1.0], anchor_layers=["last"], seeds=[0, 1],
                       detail_seeds=None if detail is None else list(detail))


def test_verdict_only_seeds_need_no_reference_capture(tmp_path):
    nodes = build_graph(expand_sweep(_sweep(tmp_path)))
    by_id = {n.id: n for n in nodes}
    refs = [n for n in nodes if n.kind == "reference"]
    assert [n.config["seed"] for n in refs] == [0]  # seed 1 draws its own split: no capture
    seed1 = [n for n in nodes if n.config["seed"] == 1]
    assert sorted(n.kind for n in seed1) == ["student", "teacher"]
    student = next(n for n in seed1 if n.kind == "student")
    assert [by_id[d].kind for d in student.deps] == ["teacher"]
    assert student.config["capture"]["enabled"] is False
    # the detail seed keeps its captures, and its ids are those of a sweep without detail seeds
    full = {n.id for n in build_graph(expand_sweep(_sweep(tmp_path, detail=None)))}
    assert {n.id for n in nodes if n.config["seed"] == 0} <= full
    assert student.id not in full


def test_the_capture_switch_joins_a_key_only_when_off(tmp_path):
    cfg = tiny_config(tmp_path)
    assert "enabled" not in student_key(cfg, "student")["capture"]
    off = with_overrides(cfg, **{"capture.enabled": False})
    assert student_key(off, "student")["capture"]["enabled"] is False
    assert run_id_for(student_key(off, "student")) != run_id_for(student_key(cfg, "student"))
    assert run_id_for(teacher_key(off)) == run_id_for(teacher_key(cfg))


@pytest.mark.slow  # over 5 s on 2 busy cores: trains two small sweeps
def test_a_scores_only_run_scores_exactly_as_a_captured_one(tmp_path):
    """Seed 1's naive student with and without the capture: other run ids, the same scores to
    the bit, and no drift / projection / hidden states in the scores-only folder; the results
    table and the report take it (drift columns empty)."""
    from anchorviz.pipeline.sweep import sweep
    from anchorviz.viz.report import write_report

    part = sweep(_sweep(tmp_path), tmp_path / "part", jobs=1, progress=False)
    full = sweep(_sweep(tmp_path, detail=None), tmp_path / "full", jobs=1, progress=False)
    a = part[(part["seed"] == 1) & (part["method"] == "naive")].iloc[0]
    b = full[(full["seed"] == 1) & (full["method"] == "naive")].iloc[0]
    assert a["run_id"] != b["run_id"]
    sa = pd.read_parquet(tmp_path / "part" / "runs" / a["run_id"] / "scores.parquet")
    sb = pd.read_parquet(tmp_path / "full" / "runs" / b["run_id"] / "scores.parquet")
    assert list(sa["pair_id"]) == list(sb["pair_id"])
    for col in ("r_chosen", "r_rejected"):
        assert (sa[col].to_numpy("float64") == sb[col].to_numpy("float64")).all(), col
    for col in ("acc_id", "acc_ood", "wrg", "aog", "nts", "acc_val"):
        assert a[col] == b[col], col
    folder = tmp_path / "part" / "runs" / a["run_id"]
    assert not any((folder / f).exists() for f in ("drift.parquet", "projection.parquet",
                                                     "hidden"))
    assert pd.isna(a["drift_cos_target"]) and pd.notna(b["drift_cos_target"])
    assert len(list((tmp_path / "part" / "shared").glob("reference-*"))) == 1
    html = write_report(tmp_path / "part").read_text()
    assert "Traceback" not in html and a["run_id"] in html
    from anchorviz.viz.widgets import SweepExplorer

    ex = SweepExplorer(tmp_path / "part")
    assert ex.update(method="naive", seed=1) == a["run_id"]
    assert "scored only" in ex.figures["umap"].layout.title.text
    assert "scored only" in ex.figures["drift"].layout.title.text
    ex.update(method="naive", seed=0)
    assert "scored only" not in ex.figures["umap"].layout.title.text
    from anchorviz.viz.drift import drift_by_layer_figure

    fig = drift_by_layer_figure(tmp_path / "part", methods=["naive"])  # seed 0's run only
    assert fig.data and all("mean of" not in (t.name or "") for t in fig.data)
    with pytest.raises(ValueError, match="scored only"):
        drift_by_layer_figure(tmp_path / "part", seed=1, methods=["naive"])


def test_attention_is_checked_and_joins_keys_only_when_set(tmp_path):
    cfg = tiny_config(tmp_path)
    with pytest.raises(ConfigError, match=r"models\.attention must be one of auto, eager, sdpa"):
        with_overrides(cfg, **{"models.attention": "flash"}).validate()
    eager = with_overrides(cfg, **{"models.attention": "eager"})
    for key in (teacher_key, lambda c: student_key(c, "student"), reference_key):
        assert "attention" not in key(cfg)
        assert key(eager)["attention"] == "eager"


def test_eager_attention_is_loaded_and_computes_the_same_rewards(tmp_path):
    from anchorviz.models.reward_model import load_reward_model
    from anchorviz.models.tokenization import encode_pairs
    from anchorviz.training.loop import score_pairs

    folder = save_tiny_model(tmp_path / "m", layers=2)
    auto, tok = load_reward_model(str(folder), dropout=False)
    eager, _ = load_reward_model(str(folder), dropout=False, attention="eager")
    assert eager.backbone.config._attn_implementation == "eager"
    assert auto.backbone.config._attn_implementation != "eager"
    torch.manual_seed(0)
    for m in (auto, eager):  # the same non-zero head on both
        m.head.load_state_dict({k: torch.full_like(v, 0.1) for k, v in m.head.state_dict().items()})
    from builders import toy_pairs

    enc = encode_pairs(tok, toy_pairs(12), max_length=16)
    ra, rb = score_pairs(auto, enc), score_pairs(eager, enc)
    assert abs(ra[0]).max() > 0
    for x, y in zip(ra, rb):
        assert abs(x - y).max() < 1e-5


@pytest.mark.slow  # over 5 s on 2 busy cores: trains a teacher and reloads it
def test_a_reloaded_run_keeps_its_attention_kernel(tmp_path):
    from anchorviz.pipeline.prepare import data_config, prepare_data
    from anchorviz.pipeline.steps import ensure_teacher
    from anchorviz.pipeline.store import RunStore, load_run_model

    cfg = with_overrides(tiny_config(tmp_path), **{"models.attention": "eager"})
    res = ensure_teacher(RunStore(tmp_path / "store"), cfg, prepare_data(data_config(cfg)))
    model, _ = load_run_model(res.run_dir)
    assert model.backbone.config._attn_implementation == "eager"
    # the packed forward (the float32 demo's) is found again too
    from anchorviz.models.packed import is_packed

    packed = with_overrides(cfg, **{"models.attention": "packed"})
    res = ensure_teacher(RunStore(tmp_path / "store"), packed,
                         prepare_data(data_config(packed)))
    model, _ = load_run_model(res.run_dir)
    assert is_packed(model.backbone) and not is_packed(load_run_model(
        ensure_teacher(RunStore(tmp_path / "store"), cfg,
                       prepare_data(data_config(cfg))).run_dir)[0].backbone)
