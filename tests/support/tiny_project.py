"""A tiny offline project for pipeline tests: random backbones saved as local folders, and
synthetic source / target pair files, so a whole run takes seconds on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

from builders import tiny_backbone, toy_pairs, word_tokenizer

from anchorviz.config import RunConfig, config_from_dict


def save_tiny_model(folder: Path, kind: str = "encoder", layers: int = 2, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tok = word_tokenizer(kind)
    model = tiny_backbone(kind, vocab_size=len(tok), layers=layers, seed=seed)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def write_pairs(path: Path, n: int, seed: int, domain: str) -> Path:
    df = toy_pairs(n, seed=seed)
    with open(path, "w") as f:
        for i, r in df.iterrows():
            # distinct prompts per row so prompt-grouped splits have many groups
            f.write(json.dumps({"prompt": f"{r.prompt} {domain} {i}".strip(), "chosen": r.chosen,
                                "rejected": r.rejected}) + "\n")
    return path


def tiny_config(tmp: Path, **overrides) -> RunConfig:
    """A RunConfig over tiny local models and data (teacher 1 layer, student 2 layers)."""
    models = tmp / "models"
    teacher = save_tiny_model(models / "teacher", layers=1, seed=1)
    student = save_tiny_model(models / "student", layers=2, seed=2)
    data = tmp / "data"
    data.mkdir(exist_ok=True)
    src = write_pairs(data / "src.jsonl", 120, seed=0, domain="movie")
    tgt = write_pairs(data / "tgt.jsonl", 40, seed=5, domain="book")
    d = {
        "data": {"source": str(src), "targets": [str(tgt)], "teacher_train": 30, "w2s_train": 40,
                 "val": 10, "source_test": 20, "target_test": 20, "max_length": 16},
        "models": {"teacher": str(teacher), "student": str(student)},
        "teacher_train": {"lr": 1e-3, "epochs": 1, "batch_size": 8, "progress": False},
        "student_train": {"lr": 1e-3, "epochs": 1, "batch_size": 8, "progress": False},
        "capture": {"projection": "pca", "n_boot": 50, "batch_size": 16},
    }
    for k, v in overrides.items():
        sec, key = k.split(".")
        d.setdefault(sec, {})[key] = v
    return config_from_dict(d)


__all__ = ["RunConfig", "save_tiny_model", "tiny_config", "write_pairs"]


def overlapping_target(tmp: Path, cfg: RunConfig) -> Path:
    """A target file holding the source's first 60 pairs and 30 pairs of its own (another
    domain): the protocol must drop the shared ones that sit in the source's training splits."""
    mixed = tmp / "data" / "mixed.jsonl"
    own = write_pairs(tmp / "data" / "own.jsonl", 30, seed=11, domain="book")
    lines = open(cfg.data.source).read().splitlines()[:60] + open(own).read().splitlines()
    mixed.write_text("\n".join(lines) + "\n")
    return mixed
