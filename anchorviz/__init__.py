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
from typing import TYPE_CHECKING

from anchorviz import config as _config

__version__ = "0.2.0"  # also the package version (pyproject: dynamic); CHANGELOG.md

# name -> the module that holds it: the one documented entry point (README, notebooks)
_HOMES = {
    "anchorviz.config": ["RunConfig", "ConfigError", "load_config", "with_overrides"],
    "anchorviz.sweep_config": ["SweepConfig", "load_sweep"],
    "anchorviz.pipeline.sweep": ["run", "sweep"],
    "anchorviz.pipeline.results": ["results_table"],
    "anchorviz.pipeline.demo": ["DEFAULT_SCENARIO", "SCENARIOS", "DemoOptions", "demo_note",
                                "demo_sweep", "power_note"],
    "anchorviz.pipeline.plan": ["describe_plan", "sweep_plan"],
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
if TYPE_CHECKING:  # what editors and type checkers see; a test keeps it equal to _HOMES
    from anchorviz.analysis.cka import (
        linear_cka as linear_cka,
    )
    from anchorviz.analysis.drift_inputs import (
        DriftError as DriftError,
    )
    from anchorviz.analysis.ood_risk import (
        OODRiskEstimator as OODRiskEstimator,
    )
    from anchorviz.analysis.refusal import (
        ood_risk_check as ood_risk_check,
    )
    from anchorviz.analysis.refusal import (
        refusal_runs as refusal_runs,
    )
    from anchorviz.analysis.refusal import (
        refusal_verdicts as refusal_verdicts,
    )
    from anchorviz.analysis.story import (
        MIN_SLICE as MIN_SLICE,
    )
    from anchorviz.analysis.story import (
        drift_summary as drift_summary,
    )
    from anchorviz.analysis.story import (
        load_story as load_story,
    )
    from anchorviz.analysis.story import (
        slice_contrast as slice_contrast,
    )
    from anchorviz.analysis.story import (
        slice_summary as slice_summary,
    )
    from anchorviz.analysis.summary import (
        anchor_beats_naive as anchor_beats_naive,
    )
    from anchorviz.analysis.summary import (
        best_on_source_val as best_on_source_val,
    )
    from anchorviz.analysis.summary import (
        failure_mode as failure_mode,
    )
    from anchorviz.analysis.summary import (
        summarize as summarize,
    )
    from anchorviz.analysis.summary import (
        verdict_lines as verdict_lines,
    )
    from anchorviz.config import (
        ConfigError as ConfigError,
    )
    from anchorviz.config import (
        RunConfig as RunConfig,
    )
    from anchorviz.config import (
        load_config as load_config,
    )
    from anchorviz.config import (
        with_overrides as with_overrides,
    )
    from anchorviz.data.artifacts import (
        DEFAULT_MARKER as DEFAULT_MARKER,
    )
    from anchorviz.data.artifacts import (
        artifact_label_correlation as artifact_label_correlation,
    )
    from anchorviz.data.readers import (
        load_pairs as load_pairs,
    )
    from anchorviz.models.reward_model import (
        load_reward_model as load_reward_model,
    )
    from anchorviz.paths import (
        read_yaml as read_yaml,
    )
    from anchorviz.paths import (
        realdata_dir as realdata_dir,
    )
    from anchorviz.paths import (
        write_yaml as write_yaml,
    )
    from anchorviz.pipeline.demo import (
        DEFAULT_SCENARIO as DEFAULT_SCENARIO,
    )
    from anchorviz.pipeline.demo import (
        SCENARIOS as SCENARIOS,
    )
    from anchorviz.pipeline.demo import (
        DemoOptions as DemoOptions,
    )
    from anchorviz.pipeline.demo import (
        demo_note as demo_note,
    )
    from anchorviz.pipeline.demo import (
        demo_sweep as demo_sweep,
    )
    from anchorviz.pipeline.demo import (
        power_note as power_note,
    )
    from anchorviz.pipeline.plan import (
        describe_plan as describe_plan,
    )
    from anchorviz.pipeline.plan import (
        sweep_plan as sweep_plan,
    )
    from anchorviz.pipeline.prepare import (
        data_config as data_config,
    )
    from anchorviz.pipeline.prepare import (
        prepare_data as prepare_data,
    )
    from anchorviz.pipeline.prepare import (
        teacher_data as teacher_data,
    )
    from anchorviz.pipeline.results import (
        results_table as results_table,
    )
    from anchorviz.pipeline.sweep import (
        run as run,
    )
    from anchorviz.pipeline.sweep import (
        sweep as sweep,
    )
    from anchorviz.sweep_config import (
        SweepConfig as SweepConfig,
    )
    from anchorviz.sweep_config import (
        load_sweep as load_sweep,
    )
    from anchorviz.viz.accuracy import (
        accuracy_figure as accuracy_figure,
    )
    from anchorviz.viz.accuracy import (
        shortcut_figure as shortcut_figure,
    )
    from anchorviz.viz.accuracy import (
        transfer_figure as transfer_figure,
    )
    from anchorviz.viz.common import (
        load_results as load_results,
    )
    from anchorviz.viz.common import (
        load_run_table as load_run_table,
    )
    from anchorviz.viz.common import (
        method_label as method_label,
    )
    from anchorviz.viz.common import (
        run_path as run_path,
    )
    from anchorviz.viz.common import (
        select_condition as select_condition,
    )
    from anchorviz.viz.common import (
        sweep_targets as sweep_targets,
    )
    from anchorviz.viz.cues import (
        cue_reliance_figure as cue_reliance_figure,
    )
    from anchorviz.viz.drift import (
        drift_by_layer_figure as drift_by_layer_figure,
    )
    from anchorviz.viz.drift import (
        drift_vs_ood_figure as drift_vs_ood_figure,
    )
    from anchorviz.viz.drift import (
        lambda_sweep_figure as lambda_sweep_figure,
    )
    from anchorviz.viz.export import (
        export_figure as export_figure,
    )
    from anchorviz.viz.projection import (
        umap_figure as umap_figure,
    )
    from anchorviz.viz.refusal import (
        RefusalExplorer as RefusalExplorer,
    )
    from anchorviz.viz.refusal import (
        drift_link_figure as drift_link_figure,
    )
    from anchorviz.viz.refusal import (
        refusal_figure as refusal_figure,
    )
    from anchorviz.viz.story import (
        StoryExplorer as StoryExplorer,
    )
    from anchorviz.viz.story import (
        cue_audit_figure as cue_audit_figure,
    )
    from anchorviz.viz.story import (
        export_story as export_story,
    )
    from anchorviz.viz.story import (
        slice_figure as slice_figure,
    )
    from anchorviz.viz.story import (
        target_drift_figure as target_drift_figure,
    )
    from anchorviz.viz.story import (
        write_story_report as write_story_report,
    )
    from anchorviz.viz.training import (
        UNINFORMATIVE_BELOW as UNINFORMATIVE_BELOW,
    )
    from anchorviz.viz.training import (
        label_confidence_figure as label_confidence_figure,
    )
    from anchorviz.viz.training import (
        loss_curve_figure as loss_curve_figure,
    )
    from anchorviz.viz.verdict import (
        verdict_figure as verdict_figure,
    )
    from anchorviz.viz.widgets import (
        RunLauncher as RunLauncher,
    )
    from anchorviz.viz.widgets import (
        SweepExplorer as SweepExplorer,
    )

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
