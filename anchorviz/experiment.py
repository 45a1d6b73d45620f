"""Compatibility module: the former hub now lives in ``anchorviz.config`` and ``anchorviz.pipeline``.

``anchorviz.config`` holds the run and sweep configs (dataclasses, loading, validation,
overrides); ``anchorviz.pipeline.prepare`` the data preparation, ``.keys`` the run keys and ids,
``.steps`` the teacher / student / capture steps, ``.sweep`` `run` and `sweep`, ``.results`` the
results table. Every name this module had is re-exported, so ``import anchorviz.experiment``
keeps working; to patch a name the pipeline calls (``train_reward_model``, ``_run_guarded``,
``ensure_teacher`` ...), patch it in the module that calls it (``anchorviz.pipeline.steps``).
"""

from anchorviz.analysis.metrics import pairwise_accuracy  # noqa: F401
from anchorviz.config import *  # noqa: F403
from anchorviz.config import (  # noqa: F401
    _MANIFESTS,
    _check_model_name,
    _dataset_identity,
    _dataset_manifests,
    _from_dict,
    _names_a_path,
    _same_dataset,
)
from anchorviz.config import __all__ as _config_all
from anchorviz.pipeline.keys import *  # noqa: F403
from anchorviz.pipeline.keys import _KEY_DEFAULTS, _is_local_model, _with_inputs  # noqa: F401
from anchorviz.pipeline.keys import __all__ as _keys_all
from anchorviz.pipeline.prepare import *  # noqa: F403
from anchorviz.pipeline.prepare import (  # noqa: F401
    _DATA_CACHE,
    _build_data,
    _group_key,
    _is_local_data,
)
from anchorviz.pipeline.prepare import __all__ as _prepare_all
from anchorviz.pipeline.results import *  # noqa: F403
from anchorviz.pipeline.results import __all__ as _results_all
from anchorviz.pipeline.results import (  # noqa: F401
    _accuracy_block,
    _base_settings,
    _bootstrap_groups,
    _correct,
    _groups,
    _label_stats,
    _result_row,
    _transfer_block,
)
from anchorviz.pipeline.steps import *  # noqa: F403
from anchorviz.pipeline.steps import (  # noqa: F401
    _PROJECTORS,
    _drift,
    _dtype,
    _encode,
    _fname,
    _load,
    _projection_table,
    _projector,
    _run_guarded,
    _run_log,
    _save_weights,
    _seam_labels,
    _seeded,
    _tracked,
)
from anchorviz.pipeline.steps import __all__ as _steps_all
from anchorviz.pipeline.sweep import *  # noqa: F403
from anchorviz.pipeline.sweep import __all__ as _sweep_all
from anchorviz.training.loop import (  # noqa: F401
    Objective,
    TrainConfig,
    score_pairs,
    train_reward_model,
)
from anchorviz.training.losses import is_layer_spec  # noqa: F401

__all__ = [*_config_all, *_prepare_all, *_keys_all, *_steps_all, *_sweep_all, *_results_all]
