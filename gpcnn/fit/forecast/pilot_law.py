"""The forecast law: the gap to one worker at epoch E from two short pilots on the user's table —
one worker, and the fit's own setting at its K — scaled by how the study's gaps decayed from epoch
3 to epoch E, more slowly on label-skewed tables; with its interval.

The study measured, per run, the pilot gap ``x = 100 * (acc_one_worker(3) - acc_K(3))`` (one
seed of each, as a user runs them) and the gap at epoch E. The ratio ``rho(E) = gap(E) / x``,
fitted by least squares over the runs, follows a power law in ``E / 3``: on IID tables (parts
a, f and j, K = 8 and 16, every merging rule) and on label-skewed ones (parts c, g and i, K = 4,
alpha 0.1 and 1). Between them the ratio moves with the table's skew index (``S_max``, the
largest total-variation distance of a segment's label mix from the table's): IID below, skewed
from ``FULL_SKEW`` on. ``reproduce/pilot_law.py`` fits these numbers from the stored runs and
scores the law held out (each setting predicted with the constants fitted without it).

It rests on one model (``bn_cnn``), one optimizer (momentum SGD) and one dataset (Fashion-MNIST):
on another model the forecast says so (``GapForecast.rests_on``) until the out-of-sample runs of
the study's part k have scored it.
"""

from __future__ import annotations

from dataclasses import dataclass

PILOT_EPOCHS = 3
# rho(E) = A * (E / PILOT_EPOCHS) ** B: (A, B), fitted by reproduce/pilot_law.py
IID_RATIO = (1.025, -0.938)
SKEWED_RATIO = (1.034, -0.430)
FULL_SKEW = 0.7  # S_max from which the skewed ratio applies
SKEWED = 0.3  # S_max from which the wider interval applies
# The 90 % interval, gap ± (BASE + SLOPE * gap), chosen on the study's held-out residuals
IID_WIDTH = (0.4, 0.3)
SKEWED_WIDTH = (1.0, 0.35)


def ratio(epochs: float, skew_max: float = 0.0) -> float:
    """``rho(E)``: the gap at epoch ``epochs`` per point of pilot gap at epoch 3, for a table of
    skew index ``skew_max`` (the IID law below it, the skewed one from ``FULL_SKEW``)."""
    iid = IID_RATIO[0] * (epochs / PILOT_EPOCHS) ** IID_RATIO[1]
    skewed = SKEWED_RATIO[0] * (epochs / PILOT_EPOCHS) ** SKEWED_RATIO[1]
    weight = min(max(skew_max / FULL_SKEW, 0.0), 1.0)
    return iid + (skewed - iid) * weight


@dataclass(frozen=True)
class GapForecast:
    """A forecast of a fit's gap to one worker at epoch ``epochs`` (validation accuracy, in
    points; positive: below one worker), with its 90 % interval and what it rests on."""

    epochs: float
    segments: int
    pilot_gap: float  # 100 * (one worker's - the setting's validation accuracy) at epoch 3
    skew_max: float
    gap: float
    low: float
    high: float
    seconds_per_epoch: float  # the setting's pilot, at its K
    rests_on: str
    pilot_runs: tuple[int, int] = (0, 0)  # the runs of the setting's and the one worker's pilots

    def message(self) -> str:
        """The forecast in one sentence."""
        side = "below" if self.gap >= 0 else "above"
        return (
            f"at epoch {self.epochs:g} with {self.segments} segments: about {abs(self.gap):.1f} "
            f"points {side} one worker's validation accuracy (90 % interval {self.low:.1f} to "
            f"{self.high:.1f}), {self.seconds_per_epoch:.0f} s per epoch; {self.rests_on}"
        )


def gap_forecast(
    one_worker: float,
    setting: float,
    epochs: float,
    *,
    segments: int,
    skew_max: float = 0.0,
    seconds_per_epoch: float = 0.0,
    rests_on: str = "",
    pilot_runs: tuple[int, int] = (0, 0),
) -> GapForecast:
    """The forecast from the pilots' validation accuracies at epoch 3 (``one_worker`` and
    ``setting``, fractions): ``rho(E) * x`` and its interval. At epoch 3 or before, the pilot's
    own gap is the measurement, with the IID width around it."""
    pilot = 100 * (one_worker - setting)
    scale = 1.0 if epochs <= PILOT_EPOCHS else ratio(epochs, skew_max)
    gap = scale * pilot
    base, slope = SKEWED_WIDTH if skew_max >= SKEWED else IID_WIDTH
    half = base + slope * abs(gap)
    return GapForecast(
        epochs,
        segments,
        pilot,
        skew_max,
        gap,
        gap - half,
        gap + half,
        seconds_per_epoch,
        rests_on,
        pilot_runs,
    )
