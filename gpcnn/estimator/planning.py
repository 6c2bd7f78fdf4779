"""``gpcnn.plan``: the cheapest setting whose forecast stays within a tolerance of one worker — the
merge rule and merges per epoch, and on a label-skewed table the two remedies that part i of the
study measured to work (re-dealing the table, a shared sample) — each candidate forecast from its
own pilot (the one-worker pilot shared), with its cost per epoch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpcnn.data.tables import describe
from gpcnn.engines import Database, connect
from gpcnn.estimator.forecasting import forecast
from gpcnn.fit.forecast.pilot_law import SKEWED, GapForecast

# The settings the study measured at K = 8 and 16, cheapest first by what a merge costs.
CANDIDATES = (("average", 1), ("bmuf", 1), ("bmuf", 4))
# With a shared sample, the cheapest and the strongest of them: the sample's share, part i's 5 %
SHARED_SAMPLE = 0.05
WITH_SHARED_SAMPLE = (("average", 1), ("bmuf", 4))


@dataclass(frozen=True)
class Candidate:
    """One setting and its forecast; ``meets``: the interval's upper end is within tolerance."""

    merge: str
    merges_per_epoch: int
    redealt: bool
    forecast: GapForecast
    meets: bool
    shared_sample: float = 0.0

    def words(self) -> str:
        dealt = ", table re-dealt IID" if self.redealt else ""
        if self.shared_sample:
            dealt = f", shared sample {100 * self.shared_sample:g} %"
        return f"{self.merge}, {self.merges_per_epoch} merge(s) per epoch{dealt}"


@dataclass(frozen=True)
class ConvergencePlan:
    """The candidates, forecast, and the cheapest that meets the tolerance (None: none does)."""

    tolerance: float
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None

    def text(self) -> str:
        """The table of candidates and the choice, as ``gpcnn plan`` prints it."""
        width = max(len(c.words()) for c in self.candidates)
        lines = [f"{'setting':<{width}} {'gap':>6} {'90 % interval':>15} {'s/epoch':>8}  meets"]
        for c in self.candidates:
            f = c.forecast
            interval = f"{f.low:.1f} to {f.high:.1f}"
            lines.append(
                f"{c.words():<{width}} {f.gap:>6.1f} {interval:>15} {f.seconds_per_epoch:>8.0f}  "
                f"{'yes' if c.meets else 'no'}"
            )
        if self.chosen is None:
            lines.append(
                f"no setting gpcnn knows stays within {self.tolerance:g} points of one worker: "
                "fewer segments or more epochs"
            )
        else:
            lines.append(f"cheapest within {self.tolerance:g} points: {self.chosen.words()}")
        return "\n".join(lines)


def plan(
    database: Database | str | None,
    table,
    model: Any,
    *,
    epochs: float,
    segments: int | None = None,
    tolerance: float = 1.0,
    validation_table=None,
    seed: int = 0,
    **params: Any,
) -> ConvergencePlan:
    """The cheapest setting whose forecast gap to one worker at ``epochs`` stays within
    ``tolerance`` points (the 90 % interval's upper end).

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        The image table the fit will train on.
    model : keras.Model, str or callable
        As ``GreenplumCNN``'s ``model``.
    epochs : float
        The epoch the fit ends at.
    segments : int, optional
        K of the fit (default: the table's segments).
    tolerance : float, default 1.0
        Points below one worker's validation accuracy the fit may end.
    validation_table : str or (schema, table)
        The table the pilots validate on.
    seed : int, default 0
        The pilots' seed.
    **params
        Any other ``GreenplumCNN`` parameter (the optimizer, learning rate, batch size ...);
        not ``merge`` or ``merges_per_epoch``, which the plan chooses.

    Returns
    -------
    ConvergencePlan
        Every candidate with its forecast and seconds per epoch, and the cheapest that meets the
        tolerance (None when none does: ``text()`` says so).

    Examples
    --------
    >>> print(gpcnn.plan(db, "fm.train", bn_cnn, epochs=15, segments=16,
    ...                  validation_table="fm.test").text())  # doctest: +SKIP
    """
    for chosen_here in ("merge", "merges_per_epoch", "merge_options"):
        if chosen_here in params:
            raise ValueError(f"{chosen_here}: the plan chooses it; leave it out")
    db = connect(database)
    info = describe(db, table)
    skewed = info.label_skew is not None and info.label_skew.max >= SKEWED
    settings = [(m, n, False, 0.0) for m, n in CANDIDATES]
    if skewed:
        settings += [(m, n, True, 0.0) for m, n in CANDIDATES]
        if segments in (None, info.segments):  # a shared sample keeps the table's segments
            settings += [(m, n, False, SHARED_SAMPLE) for m, n in WITH_SHARED_SAMPLE]
    candidates = []
    for merge, merges, redealt, shared in settings:
        found = forecast(
            db,
            table,
            model,
            epochs=epochs,
            segments=segments,
            validation_table=validation_table,
            seed=seed,
            redealt=redealt,
            shared_sample=shared,
            merge=merge,
            merges_per_epoch=merges,
            **params,
        )
        meets = found.high <= tolerance
        candidates.append(Candidate(merge, merges, redealt, found, meets, shared))
    meeting = [c for c in candidates if c.meets]
    chosen = min(meeting, key=lambda c: c.forecast.seconds_per_epoch) if meeting else None
    return ConvergencePlan(tolerance, tuple(candidates), chosen)
