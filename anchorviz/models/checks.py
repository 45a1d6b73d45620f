"""What is known of a model before it loads (`model_shape`: its layer count and positions from
the zoo catalogue or its config.json), and the models stage's check of a run config
(`check_model_settings`: registered with `anchorviz.config` by ``anchorviz/__init__.py``, so
`RunConfig.validate` runs it before anything loads or trains). Nothing is downloaded or prepared
here.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from anchorviz.choices import parse_layer_spec
from anchorviz.config import ConfigError, RunConfig
from anchorviz.models.zoo import ZOO, model_dir, unknown_message

logger = logging.getLogger(__name__)

__all__ = ["check_model_name", "check_model_settings", "model_shape"]


def model_shape(name: str) -> dict[str, int | None]:
    """``{"n_layers", "max_positions"}`` of a model, from what is known without loading it:
    the zoo catalogue's layer count, and the ``config.json`` of a local folder or of a zoo
    model's prepared folder (``num_hidden_layers`` / ``n_layer``, ``max_position_embeddings`` /
    ``n_positions``). Unknown values are None (a hub id not downloaded)."""
    out: dict[str, int | None] = {"n_layers": None, "max_positions": None}
    if name in ZOO:
        out["n_layers"] = ZOO[name].n_layers
        folder = model_dir(name)
    else:
        folder = Path(name).expanduser()
    cfg_file = folder / "config.json"
    if cfg_file.is_file():
        try:
            cfg = json.loads(cfg_file.read_text())
        except (OSError, ValueError):
            return out  # the loader names the broken file
        if isinstance(cfg, dict):
            for key, names in (("n_layers", ("num_hidden_layers", "n_layer")),
                               ("max_positions", ("max_position_embeddings", "n_positions"))):
                v = next((cfg[n] for n in names if isinstance(cfg.get(n), int)), None)
                if v is not None:
                    out[key] = v
    return out


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def check_model_name(name: str, where: str) -> None:
    """`ConfigError` naming ``where`` unless ``name`` is a zoo model, an existing local folder
    or a plausible hub id (``org/name``): checked before anything trains, so a misspelt student
    fails now, not after the teacher has trained. Nothing is downloaded or prepared here."""
    if name in ZOO:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"{where}: {name!r} is a file; a model must be a folder (config.json "
                          "+ weights), a zoo name or a hub id")
    if path.is_absolute() or name.startswith((".", "~")) or "\\" in name:
        raise ConfigError(f"{where}: model folder {name!r} does not exist")
    if _HUB_ID.fullmatch(name) and ".." not in name:
        return
    if "/" in name:
        raise ConfigError(f"{where}: {name!r} is neither a local folder nor an 'org/name' hub id")
    raise ConfigError(f"{where}: {unknown_message(name)}")


def _check_against_models(cfg: RunConfig) -> None:
    """Layer indices (``method.anchor_layers`` and ``capture.layers``: the student's) and
    ``data.max_length`` (both models') against the models' sizes where they are known
    without loading anything (`model_shape`); otherwise the check happens when the model
    loads, as logged here."""
    shapes = {k: model_shape(getattr(cfg.models, k)) for k in ("teacher", "student")}
    student = shapes["student"]
    for field_, spec in (("method.anchor_layers", cfg.method.anchor_layers),
                         ("capture.layers", cfg.capture.layers)):
        layers = parse_layer_spec(spec)
        if isinstance(layers, str):
            continue
        if student.get("n_layers") is None:
            logger.info("%s %r: the layer count of models.student %r is not known before it "
                        "loads; checked then", field_, spec, cfg.models.student)
            continue
        n = student["n_layers"]
        for layer in layers:
            if layer > n:
                raise ConfigError(
                    f"{field_} {spec!r}: layer {layer} is outside the student "
                    f"{cfg.models.student!r}, whose hidden states are 0 (embeddings) .. "
                    f"{n} (the last of its {n} blocks)")
    for k, shape in shapes.items():
        most = shape.get("max_positions")
        if isinstance(most, int) and cfg.data.max_length > most:
            raise ConfigError(
                f"data.max_length {cfg.data.max_length} is more than models.{k} "
                f"{getattr(cfg.models, k)!r} reads: {most} positions "
                "(max_position_embeddings); set data.max_length <= " + str(most))


def check_model_settings(cfg: RunConfig) -> None:
    """The models stage's check of a run config: ``models.teacher`` / ``models.student`` name a
    zoo model, a local folder or a hub id (`check_model_name`), and the layer indices and
    ``data.max_length`` fit the models where their sizes are known (`model_shape`)."""
    for k in ("teacher", "student"):
        check_model_name(getattr(cfg.models, k), f"models.{k}")
    _check_against_models(cfg)
