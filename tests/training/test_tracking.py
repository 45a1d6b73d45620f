"""Experiment tracking (issue 21.2): ``report_to`` in a run config logs per-step losses (fit,
ANCHOR MSE, lambda x MSE / fit), learning rate, per-validation accuracy and the final
accuracies; read back from TensorBoard's event files and from an MLflow file store. Off by
default; never part of a run id; the training numbers do not change."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pandas as pd
import pytest
from tiny_project import tiny_config

from anchorviz.config import ConfigError, config_from_dict, with_overrides
from anchorviz.pipeline.keys import run_id_for, student_key, teacher_key
from anchorviz.pipeline.sweep import run
from anchorviz.training.tracking import check_report_to, final_metrics, step_metrics


def _anchor_cfg(tmp_path, report_to):
    cfg = tiny_config(tmp_path, **{"method.name": "anchor", "method.anchor_lambda": 2.0})
    return with_overrides(cfg, ceiling=False, report_to=report_to)


def test_off_by_default_and_not_in_run_ids(tmp_path):
    cfg = tiny_config(tmp_path)
    assert cfg.report_to == []
    tracked = with_overrides(cfg, report_to=["tensorboard"])
    assert run_id_for(teacher_key(tracked)) == run_id_for(teacher_key(cfg))
    assert run_id_for(student_key(tracked, "student")) == run_id_for(student_key(cfg, "student"))
    assert with_overrides(cfg, report_to="none").report_to == []
    assert with_overrides(cfg, report_to="tensorboard").report_to == ["tensorboard"]


def test_bad_report_to_is_a_config_error(tmp_path, monkeypatch):
    d = tiny_config(tmp_path).to_dict()
    d["report_to"] = ["tensorbord"]
    with pytest.raises(ConfigError, match="unknown backend 'tensorbord'"):
        config_from_dict(d)
    import anchorviz.training.tracking as tracking

    monkeypatch.setattr(tracking, "_installed", lambda b: b != "wandb")
    d["report_to"] = ["wandb"]
    with pytest.raises(ConfigError, match=r'pip install "anchorviz\[wandb\]"'):
        config_from_dict(d)
    assert check_report_to("all") == ["tensorboard", "mlflow"]


def test_step_and_final_metrics():
    m = step_metrics({"step": 3, "fit": 0.5, "anchor": 0.01, "total": 0.52, "lr": 1e-4,
                      "grad_norm": 2.0}, anchor_lambda=2.0)
    assert m["train/anchor_weighted"] == pytest.approx(0.02)
    assert m["train/anchor_share"] == pytest.approx(0.04)
    assert m["train/learning_rate"] == pytest.approx(1e-4)
    assert "train/anchor_loss" not in step_metrics({"step": 0, "fit": 0.5})

    def iv(p):
        return {"point": p, "lo": p, "hi": p}

    f = final_metrics({"accuracy": {"source_test": iv(0.8), "ood": iv(0.6),
                                    "target_test:amazon": iv(0.7)},
                       "transfer": {"ood": {"wrg": iv(0.1), "aog": iv(0.0), "nts": iv(0.0),
                                            "pgr": None},
                                    "target_test:amazon": {"wrg": iv(0.1), "aog": iv(0.05),
                                                           "nts": iv(0.05)}},
                       "acc_val": 0.75})
    assert f == {"final/acc_id": 0.8, "final/acc_ood": 0.6, "final/acc_amazon": 0.7,
                 "final/wrg": 0.1, "final/aog": 0.0, "final/nts": 0.0, "final/aog_amazon": 0.05,
                 "final/nts_amazon": 0.05, "final/acc_val": 0.75}


def test_tensorboard_event_files_hold_what_the_run_logged(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    plain = run(_anchor_cfg(tmp_path / "plain", []), tmp_path / "plain-out", jobs=1,
                progress=False)
    out = tmp_path / "tb-out"
    res = run(_anchor_cfg(tmp_path / "plain", ["tensorboard"]), out, jobs=1, progress=False)
    assert [r.run_id for r in res] == [r.run_id for r in plain]
    student = res[-1]
    history = pd.read_parquet(student.run_dir / "history.parquet")
    # tracking does not touch the numbers
    pd.testing.assert_frame_equal(history, pd.read_parquet(plain[-1].run_dir / "history.parquet"))

    ev = EventAccumulator(str(out / "tensorboard" / student.run_id)).Reload()
    tags = set(ev.Tags()["scalars"])
    for tag in ("train/fit_loss", "train/anchor_loss", "train/anchor_weighted",
                "train/anchor_share", "train/total_loss", "train/learning_rate",
                "train/grad_norm", "eval/val_loss", "eval/val_accuracy", "final/acc_id",
                "final/acc_ood", "final/wrg", "final/aog", "final/nts"):
        assert tag in tags, tag
    fit = ev.Scalars("train/fit_loss")
    assert [e.step for e in fit] == [s + 1 for s in history["step"]]
    assert [e.value for e in fit] == pytest.approx(history["fit"].tolist(), rel=1e-6)
    share = [e.value for e in ev.Scalars("train/anchor_share")]
    assert share == pytest.approx((2.0 * history["anchor"] / history["fit"]).tolist(), rel=1e-5)
    assert [e.value for e in ev.Scalars("train/learning_rate")] == pytest.approx(
        history["lr"].tolist(), rel=1e-6)
    evals = student.metrics["train"]["val"]
    assert [e.value for e in ev.Scalars("eval/val_accuracy")] == pytest.approx(
        [v["val_acc"] for v in evals])
    assert ev.Scalars("final/acc_id")[0].value == pytest.approx(
        student.metrics["accuracy"]["source_test"]["point"])
    assert (out / "tensorboard" / res[0].run_id).is_dir()  # the teacher too

    # a finished run is read from the store, not trained again: nothing new is logged
    again = run(_anchor_cfg(tmp_path / "plain", ["tensorboard"]), out, jobs=1, progress=False)
    assert not any(r.computed for r in again)


def test_mlflow_file_store_holds_what_the_run_logged(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = tmp_path / "ml-out"
    res = run(_anchor_cfg(tmp_path, ["mlflow"]), out, jobs=1, progress=False)
    student = res[-1]
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("anchorviz-ml-out")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {r.run_id for r in res}
    r = runs[student.run_id]
    assert r.info.status == "FINISHED"
    assert r.data.params["method.anchor_lambda"] == "2.0"
    assert r.data.params["kind"] == "student"
    history = pd.read_parquet(student.run_dir / "history.parquet")
    fit = client.get_metric_history(r.info.run_id, "train/fit_loss")
    assert sorted(m.step for m in fit) == [s + 1 for s in history["step"]]
    assert [m.value for m in sorted(fit, key=lambda m: m.step)] == pytest.approx(
        history["fit"].tolist(), rel=1e-6)
    assert len(client.get_metric_history(r.info.run_id, "train/anchor_share")) == len(history)
    assert r.data.metrics["final/acc_id"] == pytest.approx(
        student.metrics["accuracy"]["source_test"]["point"])
    assert "eval/val_accuracy" in r.data.metrics


def test_wandb_receives_the_same_numbers(tmp_path, monkeypatch):
    """W&B through a stand-in module (the real one needs an account or offline files)."""
    calls = {"init": [], "log": [], "finish": []}

    class FakeRun:
        def log(self, metrics, step):
            calls["log"].append((step, metrics))

        def finish(self, exit_code=0):
            calls["finish"].append(exit_code)

    fake = types.ModuleType("wandb")
    fake.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    fake.init = lambda **kw: calls["init"].append(kw) or FakeRun()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_PROJECT", "w2s")
    res = run(_anchor_cfg(tmp_path, ["wandb"]), tmp_path / "wb", jobs=1, progress=False)
    assert [kw["name"] for kw in calls["init"]] == [r.run_id for r in res]
    assert all(kw["project"] == "w2s" for kw in calls["init"])
    assert calls["finish"] == [0, 0]
    logged = {k for _, m in calls["log"] for k in m}
    assert {"train/anchor_share", "eval/val_accuracy", "final/aog"} <= logged
