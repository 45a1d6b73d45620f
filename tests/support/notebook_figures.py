"""The figures notebooks 01-04 show, built from a fake sweep (04: the committed real-data story
folder) with the calls the notebooks make
(tests/test_notebook_images.py checks their static layout numbers, tests/test_browser.py
renders them and checks that no text runs into another)."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from fake_sweep import write_fake_sweep

from anchorviz import (
    accuracy_figure,
    drift_by_layer_figure,
    drift_vs_ood_figure,
    label_confidence_figure,
    lambda_sweep_figure,
    run_path,
    select_condition,
    shortcut_figure,
    transfer_figure,
    umap_figure,
    verdict_figure,
)
from anchorviz.viz.common import load_results

STRENGTH = 0.8


def demo_like_sweep(root: Path) -> Path:
    """A fake sweep shaped like the demo: three seeds, two lambdas, three targets, a marker."""
    return write_fake_sweep(root, seeds=(0, 1, 2), lambdas=(1.0, 10.0), layers=("last",),
                            targets=("amazon", "nyt", "tweets"), methods=("naive", "anchor"),
                            artifact_strengths=(STRENGTH,), artifact_kind="marker",
                            projection_layers=(6,))


def notebook_figures(sweep: Path) -> dict[str, go.Figure]:
    """``{name: figure}``: every figure cell of notebooks 01-03 (explorer panels aside), and the
    real-data story's figures of notebook 04 (its explorer's panels included)."""
    results = load_results(sweep)
    cond, _ = select_condition(results, artifact_strength=STRENGTH)
    teacher_id = cond.loc[cond["kind"] == "teacher", "run_id"].iloc[0]
    students = cond[cond["kind"] == "student"]
    naive_dir = run_path(sweep, students.loc[students["method"] == "naive", "run_id"].iloc[0])
    anchor = students[students["method"] == "anchor"]
    strongest = anchor.loc[anchor["anchor_lambda"] == anchor["anchor_lambda"].max(), "run_id"]
    lam = lambda_sweep_figure(results=results, artifact_strength=STRENGTH)
    lam.update_layout(title_text="Teacher reads 25% of the markers. " + lam.layout.title.text)
    return {
        "01 verdict": verdict_figure(sweep, results=cond),
        "01 label confidence": label_confidence_figure(run_path(sweep, teacher_id)),
        "01 accuracy": accuracy_figure(sweep, results=results, artifact_strength=STRENGTH),
        "01 shortcut": shortcut_figure(sweep, results=results, artifact_strength=STRENGTH),
        "01 transfer": transfer_figure(sweep, results=results, artifact_strength=STRENGTH),
        "02 drift cka": drift_by_layer_figure(sweep, metric="cka", results=results,
                                              artifact_strength=STRENGTH),
        "02 drift cosine": drift_by_layer_figure(sweep, metric="cosine", results=results,
                                                 artifact_strength=STRENGTH),
        "02 map naive domain": umap_figure(naive_dir, color_by="domain", max_points=600),
        "02 map naive side": umap_figure(naive_dir, color_by="side", max_points=600),
        "02 map anchor": umap_figure(run_path(sweep, strongest.iloc[0]), color_by="domain",
                                     max_points=600),
        "02 drift vs ood": drift_vs_ood_figure(sweep, drift_col="drift_cos_target",
                                               gain_col="aog", results=results,
                                               artifact_strength=STRENGTH),
        "03 lambda sweep": lam,
        **story_figures(),
    }


def story_figures() -> dict[str, go.Figure]:
    """Notebook 04's real-data story: the audit and the explorer's two panels as first drawn."""
    from anchorviz import StoryExplorer, cue_audit_figure, load_story

    story = load_story(Path(__file__).resolve().parents[2] / "notebooks" / "data" / "real_story")
    explorer = StoryExplorer(story)
    return {"04 cue audit": cue_audit_figure(story),
            "04 slices": go.Figure(explorer.figures["slices"]),
            "04 drift": go.Figure(explorer.figures["drift"])}
