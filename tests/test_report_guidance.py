"""The report says what to look for: captions, contents, header, a sortable results table, colours
that tell ANCHOR from the ceiling, and maps coloured by the planted marker."""

from __future__ import annotations

import pandas as pd
import pytest

from anchorviz.viz.common import (
    ANCHOR_SCALES,
    METHOD_COLORS,
    MIN_CEILING_DELTA_E,
    _lab,
    color_distance,
    group_table,
)

# --------------------------------------------------------------------------- colours


def _grid(lambdas, layers) -> pd.DataFrame:
    rows = [{"method": "ceiling", "anchor_lambda": 0.0, "anchor_layers": ""},
            {"method": "naive", "anchor_lambda": 0.0, "anchor_layers": ""}]
    rows += [{"method": "anchor", "anchor_lambda": lam, "anchor_layers": lay}
             for lay in layers for lam in lambdas]
    return pd.DataFrame(rows)


def test_color_distance_is_cielab_delta_e():
    assert color_distance("#000000", "#ffffff") == pytest.approx(100, abs=0.01)
    assert color_distance("#0072B2", "rgb(0, 114, 178)") == pytest.approx(0, abs=1e-9)
    assert color_distance("#E69F00", "#56B4E9") > 30


@pytest.mark.parametrize("lambdas", [(10.0,), (0.1, 1.0, 10.0), (0.01, 0.1, 1.0, 10.0, 100.0),
                                     tuple(10.0 ** k for k in range(-3, 4))])
def test_every_anchor_lambda_stays_far_from_the_ceilings_black(lambdas):
    layers = [*ANCHOR_SCALES, "8,10"]  # "8,10": a layer list, the grey ramp
    groups = group_table(_grid(lambdas, layers))
    ceiling = METHOD_COLORS["ceiling"]
    anchor = groups[groups["method"] == "anchor"]
    assert len(anchor) == len(lambdas) * len(layers)
    for row in anchor.itertuples():
        assert color_distance(row.color, ceiling) >= MIN_CEILING_DELTA_E, (
            f"ANCHOR lambda {row.anchor_lambda:g} ({row.anchor_layers}) is {row.color}, "
            f"{color_distance(row.color, ceiling):.1f} from the ceiling's {ceiling}")
    # the ramp still reads: a stronger lambda is a darker shade of its layer choice's hue
    for lay in layers:
        part = anchor[anchor["anchor_layers"] == lay].sort_values("anchor_lambda")
        lightness = [_lab(c)[0] for c in part["color"]]
        assert all(a > b for a, b in zip(lightness, lightness[1:])), (lay, lightness)


# --------------------------------------------------------------------------- drift layout


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from fake_sweep import write_fake_sweep

    return write_fake_sweep(tmp_path_factory.mktemp("sweep"), seeds=(0, 1), lambdas=(0.1, 10.0),
                            layers=("last",), artifact_strengths=(1.0,),
                            artifact_kind="marker", teacher_visibilities=(0.5,))


@pytest.mark.parametrize("metric", ["cka", "cka_debiased", "cosine", "cosine_centred",
                                    "cosine_median", "cosine_p90"])
def test_drift_axis_title_fits_beside_the_plot_not_into_the_title(sweep, metric):
    """A y-axis title is centred on the plot area; longer than it, it runs up into the figure
    title (the centred-drift figure did). ~8 px per character at plotly's 14 px axis font."""
    from anchorviz.viz.drift import DRIFT_METRICS, drift_by_layer_figure

    fig = drift_by_layer_figure(sweep, metric=metric)
    lay = fig.layout
    plot_height = lay.height - lay.margin.t - lay.margin.b
    title = lay.yaxis.title.text
    assert 8 * len(title) < 0.9 * plot_height, (title, plot_height)
    assert f"y: {DRIFT_METRICS[metric][1]}" in lay.title.text  # the full name is still said
