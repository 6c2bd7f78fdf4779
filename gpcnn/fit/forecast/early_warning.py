"""The early warning: how far below one worker a fit is on course to end, from the drift ratio of
its first three epochs.

The study fitted a run's gap to one worker at epoch 15 (validation accuracy, in points) on the mean
drift ratio of its epochs 1 to 3 (``diagnostics``: the spread of the segment models over the merged
step), over 24 runs of Fashion-MNIST with ``bn_cnn`` and momentum SGD at K = 4 and 8: 12 on IID
tables (average and block momentum, 1 and 4 merges per epoch) and 12 on label-skewed ones
(Dirichlet alpha = 0.1 and its remedies). Rank correlation 0.83, the line below, leave-one-out error
2.8 points (docs/convergence.md, "The early warning"; ``reproduce/early_warning.py`` prints these
numbers). It is one model and one dataset's line: on others it says which way a fit is heading,
not by how much. Under strong label skew it forecasts too little: scored on parts c and g's
alpha = 0.1 runs, which it was not fitted on, it missed by 5 to 23 points (docs/convergence.md,
"The early warning on parts c and g"); the fit's skew warning is the one to act on there.

``early_message`` is what a fit says at epoch 3, from what it stands on (``EarlyBasis``): where
the forecast's one-worker pilot of the same table, model and parameters is stored, the forecast
law against it (``pilot_law``, which holds under label skew too); else this line, on the model it
was fitted on and an IID table, and no number otherwise.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpcnn.fit.forecast.pilot_law import SKEWED, gap_forecast

EARLY_EPOCHS = 3.0
INTERCEPT, SLOPE = -3.02, 7.21  # gap in points = INTERCEPT + SLOPE * early drift ratio
ERROR = 2.79  # the line's leave-one-out root-mean-square error, in points


@dataclass(frozen=True)
class GapForecast:
    """The early warning of one fit: the mean drift ratio of epochs 1 to ``epochs``, the gap to
    one worker at epoch 15 it points to and that line's error (root-mean-square, in points)."""

    epochs: float
    drift_ratio: float
    gap: float
    error: float = ERROR

    def message(self) -> str:
        """The sentence a fit logs."""
        side = "below" if self.gap >= 0 else "above"
        return (
            f"drift ratio {self.drift_ratio:.2f} over epochs 1-{self.epochs:g}: on course to end "
            f"about {abs(self.gap):.1f} points {side} one worker's validation accuracy at epoch 15 "
            f"(± {self.error:.1f}; calibrated on Fashion-MNIST with bn_cnn, "
            "docs/convergence.md 'The early warning')"
        )


def line_gap(drift_ratio: float) -> float:
    """The gap to one worker at epoch 15, in points, that the study's line gives an early drift
    ratio."""
    return INTERCEPT + SLOPE * drift_ratio


def forecast_gap(history: Sequence[dict], epochs: float = EARLY_EPOCHS) -> GapForecast | None:
    """The early warning of a fit's history (``GreenplumCNN.history_``, ``show_run``'s), or None
    until it has ``epochs`` epochs with a drift ratio in each iteration.

    Parameters
    ----------
    history : sequence of dict
        One row per iteration, with ``epoch`` and ``drift_ratio``.
    epochs : float
        The early epochs whose mean drift ratio the line takes (the study's: 3).

    Returns
    -------
    GapForecast or None
        None before epoch ``epochs`` ends, or when an early iteration has no drift ratio (one
        segment, the model hopper, or a merged step of 0).
    """
    early = [row for row in history if row["epoch"] <= epochs]
    if not history or history[-1]["epoch"] < epochs or not early:
        return None
    ratios = [r for row in early if (r := row.get("drift_ratio")) is not None]
    if len(ratios) < len(early):
        return None
    drift = statistics.fmean(ratios)
    return GapForecast(epochs, drift, line_gap(drift))


# bn_cnn's layers (class, filters, units, kernel, rate) without the input and the classes: the
# architecture the line was fitted on, whatever the image shape
CALIBRATED_LAYERS = (
    ("Conv2D", 32, None, [3, 3], None),
    ("BatchNormalization", None, None, None, None),
    ("Activation", None, None, None, None),
    ("MaxPooling2D", None, None, None, None),
    ("Conv2D", 64, None, [3, 3], None),
    ("BatchNormalization", None, None, None, None),
    ("Activation", None, None, None, None),
    ("MaxPooling2D", None, None, None, None),
    ("Flatten", None, None, None, None),
    ("Dropout", None, None, None, 0.25),
    ("Dense", None, 128, None, None),
    ("Dropout", None, None, None, 0.25),
    ("Dense", None, None, None, None),
)


def layer_signature(model_json: str) -> tuple:
    """A model's layers as (class, filters, units, kernel, rate), without its input layer and
    without the last layer's width (the table's classes)."""
    layers = json.loads(model_json).get("config", {}).get("layers", [])
    found = [
        (
            layer["class_name"],
            layer["config"].get("filters"),
            layer["config"].get("units"),
            layer["config"].get("kernel_size"),
            layer["config"].get("rate"),
        )
        for layer in layers
        if layer["class_name"] != "InputLayer"
    ]
    if found:
        found[-1] = (found[-1][0], found[-1][1], None, found[-1][3], found[-1][4])
    return tuple(found)


@dataclass(frozen=True)
class EarlyBasis:
    """What a fit's early warning stands on: the accuracy at epoch 3 of a stored one-worker
    pilot of the same table, model and parameters (None: none is stored), whether the model is
    the one the drift line was fitted on, the epoch the fit ends at, its K and its table's skew
    index."""

    reference: tuple[int, float] | None  # (the pilot's run id, its validation accuracy)
    calibrated: bool
    final_epoch: float
    segments: int
    skew_max: float = 0.0


def early_message(history: Sequence[dict], basis: EarlyBasis) -> str | None:
    """The early warning's sentence once the fit's history reaches epoch 3, or None (before, or
    with neither a pilot to compare with nor a drift ratio in every early iteration)."""
    if not history or history[-1]["epoch"] < EARLY_EPOCHS:
        return None
    at_3 = next(r for r in history if r["epoch"] >= EARLY_EPOCHS)
    if basis.reference is not None and at_3.get("val_accuracy") is not None:
        run_id, accuracy = basis.reference
        found = gap_forecast(
            accuracy,
            float(at_3["val_accuracy"]),
            basis.final_epoch,
            segments=basis.segments,
            skew_max=basis.skew_max,
        )
        side = "below" if found.gap >= 0 else "above"
        return (
            f"{abs(found.pilot_gap):.1f} points {'below' if found.pilot_gap >= 0 else 'above'} "
            f"the one-worker pilot (run {run_id}) at epoch {EARLY_EPOCHS:g}: on course to end "
            f"about {abs(found.gap):.1f} points {side} one worker's validation accuracy at epoch "
            f"{found.epochs:g} (90 % interval {found.low:.1f} to {found.high:.1f}; the "
            "forecast's law, docs/guide/forecast.md)"
        )
    drift = forecast_gap(history)
    if drift is None:
        return None
    head = f"drift ratio {drift.drift_ratio:.2f} over epochs 1-{drift.epochs:g}"
    if basis.skew_max >= SKEWED:
        return (
            f"{head}; the table's labels are skewed (index {basis.skew_max:.2f}), where this "
            "line, fitted on IID tables, forecasts too little: no number (gpcnn.forecast "
            "pilots the table)"
        )
    if not basis.calibrated:
        return (
            f"{head}; the line from drift to gap was fitted on bn_cnn alone: no number for this "
            "model (gpcnn.forecast pilots it)"
        )
    return drift.message()
