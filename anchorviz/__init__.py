"""anchorviz: weak-to-strong reward models, representation drift and ANCHOR.

The package is laid out by the stage a preference pair goes through (docs/ARCHITECTURE.md):
``data`` (load, split, artefact) -> ``models`` (reward model, tokenization, zoo) -> ``training``
(losses, reference, the loop) -> ``analysis`` (capture, drift, projection, metrics, summaries)
-> ``pipeline`` (store, steps, sweeps, the results table) -> ``viz`` (figures, widgets, report);
``config`` holds the run config, ``sweep_config`` the sweep config and ``cli`` the command
line.

Every name the README and the notebooks use is importable from here, loaded on first use
(``import anchorviz`` stays cheap); each also lives in exactly one stage module, named in
``_HOMES`` below::

    from anchorviz import RunConfig, run, accuracy_figure
"""

import importlib
import logging

from anchorviz import config as _config

__version__ = "0.2.0"  # also the package version (pyproject: dynamic); CHANGELOG.md

# name -> the module that holds it: the one documented entry point (README, notebooks)
_HOMES = {
    "anchorviz.config": ["RunConfig", "ConfigError", "load_config", "with_overrides"],
    "anchorviz.sweep_config": ["SweepConfig", "load_sweep"],
    "anchorviz.pipeline.sweep": ["run", "sweep"],
    "anchorviz.pipeline.results": ["results_table"],
    "anchorviz.pipeline.demo": ["DEFAULT_SCENARIO", "SCENARIOS", "demo_note", "demo_sweep",
                                "power_note"],
    "anchorviz.pipeline.prepare": ["data_config", "prepare_data", "teacher_data"],
    "anchorviz.data.readers": ["load_pairs"],
    "anchorviz.paths": ["read_yaml", "realdata_dir", "write_yaml"],
    "anchorviz.data.artifacts": ["DEFAULT_MARKER", "artifact_label_correlation"],
    "anchorviz.models.reward_model": ["load_reward_model"],
    "anchorviz.analysis.drift_inputs": ["DriftError"],
    "anchorviz.analysis.cka": ["linear_cka"],
    "anchorviz.analysis.ood_risk": ["OODRiskEstimator"],
    "anchorviz.analysis.summary": ["anchor_beats_naive", "best_on_source_val", "failure_mode",
                                   "summarize", "verdict_lines"],
    "anchorviz.viz.widgets": ["RunLauncher", "SweepExplorer"],
    "anchorviz.viz.accuracy": ["accuracy_figure", "shortcut_figure", "transfer_figure"],
    "anchorviz.viz.drift": ["drift_by_layer_figure", "drift_vs_ood_figure",
                            "lambda_sweep_figure"],
    "anchorviz.viz.projection": ["umap_figure"],
    "anchorviz.viz.verdict": ["verdict_figure"],
    "anchorviz.viz.cues": ["cue_reliance_figure"],
    "anchorviz.analysis.story": ["MIN_SLICE", "drift_summary", "load_story", "slice_contrast",
                                 "slice_summary"],
    "anchorviz.viz.story": ["StoryExplorer", "cue_audit_figure", "export_story", "slice_figure",
                            "target_drift_figure", "write_story_report"],
    "anchorviz.analysis.refusal": ["ood_risk_check", "refusal_runs", "refusal_verdicts"],
    "anchorviz.viz.refusal": ["RefusalExplorer", "drift_link_figure", "refusal_figure"],
    "anchorviz.viz.training": ["UNINFORMATIVE_BELOW", "label_confidence_figure",
                               "loss_curve_figure"],
    "anchorviz.viz.export": ["export_figure"],
    "anchorviz.viz.common": ["load_results", "load_run_table", "method_label", "run_path",
                             "select_condition", "sweep_targets"],
}
_PUBLIC = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["__version__", *_PUBLIC]


def _check_in_stages(cfg) -> None:
    """The run-config checks that need a stage's knowledge, run by every `RunConfig.validate`
    (config imports no stage; the package root wires the stages' checks into it)."""
    # lazy: the stages (pandas, torch) load on the first validation, not at `import anchorviz`
    from anchorviz.data.entries import check_data_settings
    from anchorviz.models.checks import check_model_settings
    from anchorviz.training.checks import check_training_settings

    check_training_settings(cfg)
    check_model_settings(cfg)
    check_data_settings(cfg)


_config.add_stage_check(_check_in_stages)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'anchorviz' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # once: later look-ups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


logging.getLogger(__name__).addHandler(logging.NullHandler())
