"""Rows dropped while loading are counted in the run folder, not only logged: the prepared data
carries a per-dataset drop report and the teacher's metrics.json holds its counts."""

from __future__ import annotations

import json

from tiny_project import overlapping_target, tiny_config, write_pairs

from anchorviz.config import with_overrides
from anchorviz.data.entries import dataset_label, target_name
from anchorviz.pipeline.keys import run_id_for, teacher_key
from anchorviz.pipeline.prepare import data_config, data_drop_report, prepare_data, protocol_report
from anchorviz.pipeline.steps import drop_metrics, ensure_teacher
from anchorviz.pipeline.store import RunStore


def _source_with_bad_rows(path):
    """120 good pairs, then: a duplicate of the first, a chosen == rejected pair, a blank
    (zero-width space) response and a line that is not JSON."""
    write_pairs(path, 120, seed=0, domain="movie")
    first = json.loads(path.read_text().splitlines()[0])
    with open(path, "a") as f:
        f.write(json.dumps(first) + "\n")
        f.write(json.dumps({"prompt": "same p", "chosen": "same answer",
                            "rejected": "same answer"}) + "\n")
        f.write(json.dumps({"prompt": "blank p", "chosen": "\u200b",
                            "rejected": "a real answer"}) + "\n")
        f.write('{"prompt": "broken", "chosen": \n')
    return path


def test_teacher_metrics_count_the_rows_dropped_at_load(tmp_path, monkeypatch):
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    src = _source_with_bad_rows(tmp_path / "bad_src.jsonl")
    cfg = tiny_config(tmp_path, **{"data.source": str(src)})
    data = prepare_data(data_config(cfg))
    label = dataset_label(cfg.data.source)
    target = dataset_label(cfg.data.targets[0])
    want = {"duplicate": 1, "chosen_equals_rejected": 1, "empty_response": 1,
            "malformed_row": 1}
    report = data_drop_report(data)
    assert report[label]["dropped"] == want
    assert report[label]["total"] == 124 and report[label]["kept"] == 120
    assert all(report[label]["examples"][r] for r in want)
    assert report[target]["dropped"] == {}
    # every caller gets its own copy of the report
    report[label]["dropped"]["duplicate"] = 99
    assert data_drop_report(prepare_data(data_config(cfg)))[label]["dropped"]["duplicate"] == 1

    teacher = ensure_teacher(RunStore(tmp_path / "out"), cfg, data)
    m = json.loads((teacher.run_dir / "metrics.json").read_text())
    assert m["data_dropped"] == {label: want, target: {}}
    assert set(m["data_drop_examples"][label]) == set(want)
    # the drop report is output, not key
    assert teacher.run_id == run_id_for(teacher_key(cfg))
    assert "data_dropped" not in json.dumps(teacher_key(cfg))


def test_target_pairs_overlapping_the_source_are_counted_per_dataset(tmp_path, monkeypatch):
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    cfg = tiny_config(tmp_path)
    mixed = overlapping_target(tmp_path, cfg)
    cfg = with_overrides(cfg, **{"data.targets": [str(mixed)]})
    data = prepare_data(data_config(cfg))
    n = protocol_report(data)[f"target_test:{target_name(str(mixed))}"]
    assert n > 0
    report = data_drop_report(data)
    assert report[dataset_label(str(mixed))]["dropped"] == {"overlaps_source": n}
    assert report[dataset_label(cfg.data.source)]["dropped"] == {}
    assert drop_metrics(data)["data_dropped"] == {dataset_label(str(mixed)): {"overlaps_source": n},
                                                  dataset_label(cfg.data.source): {}}
