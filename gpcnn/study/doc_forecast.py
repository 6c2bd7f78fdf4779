"""Part k's numbers (``gpcnn.study.doc_numbers``): the forecasts committed before their runs
(``docs/img/study/k/forecasts.json``), the plans (``plans.json``), and their score once the runs
are stored (``runs/<configuration>-s<seed>.json`` and the one worker's ``-single-``), as
``reproduce/forecast_study.py`` writes them.

``forecast/table``
    the forecasts, one row per configuration: each seed's gap and 90 % interval at the forecast
    epoch, their mean (a block: the whole table).
``forecast/plans``
    each plan's candidates and choice (a block).
``forecast/score``
    the configurations whose runs are stored: forecast and measured gap (each the mean of the
    seeds), whether the interval holds (a block); ``forecast/held`` how many of how many hold,
    ``forecast/mae/iid`` and ``forecast/mae/skewed`` the mean absolute error in points (2 decimals),
    ``forecast/rms/skewed`` the root-mean-square error of each seed's forecast on the skewed
    tables (what a fit's early warning after its forecast says), ``forecast/cost`` the pilots'
    seconds against their runs' (both pilots, and the one worker's alone, which is the extra when
    the setting's pilot is continued), the range over the configurations in percent.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from gpcnn.fit.forecast.pilot_law import PILOT_EPOCHS
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_results import STUDY, Results

PART = STUDY / "k"


@dataclass(frozen=True)
class Scored:
    """One configuration's forecast (the seeds' mean) against its runs' measured gap."""

    config: dict
    gap: float
    low: float
    high: float
    measured: float
    seeds: int
    misses: tuple[float, ...]  # each seed's forecast minus its measured gap
    cost: tuple[float, float]  # seconds of both pilots, of the one worker's, over the run's

    @property
    def held(self) -> bool:
        return self.low <= self.measured <= self.high


def describe(config: dict) -> list[str]:
    """A configuration's cells: model and optimizer, K, table, rule."""
    table = "IID" if config["alpha"] is None else f"Dirichlet α = {config['alpha']:g}"
    rule = config["merge"]
    if config["merges_per_epoch"] > 1:
        rule += f", {config['merges_per_epoch']} merges per epoch"
    return [
        f"`{config['model']}`, {config['optimizer']}",
        str(config["segments"]),
        table,
        rule,
    ]


def by_configuration(forecasts: dict) -> dict[int, list[dict]]:
    """The forecasts of each configuration, seed by seed."""
    found: dict[int, list[dict]] = {}
    for record in sorted(forecasts.values(), key=lambda r: (r["config"]["number"], r["seed"])):
        found.setdefault(record["config"]["number"], []).append(record)
    return found


def _table(results: Results) -> str:
    lines = [
        "| # | model, optimizer | K | table (skew index) | rule | forecast at epoch 8, each seed "
        "[90 %] | mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, records in by_configuration(results.json(PART / "forecasts.json")).items():
        seeds = "; ".join(f"{r['gap']:.1f} [{r['low']:.1f}, {r['high']:.1f}]" for r in records)
        mean = statistics.fmean(r["gap"] for r in records)
        model, k, table, rule = describe(records[0]["config"])
        skew = ", ".join(f"{r['skew_max']:.2f}" for r in records)
        cells = [str(number), model, k, f"{table} ({skew})", rule, seeds, f"{mean:.1f}"]
        lines.append("| " + " | ".join(cells).replace("-", "−") + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def _plans(results: Results) -> str:
    blocks = []
    for number, plan in sorted(results.json(PART / "plans.json").items()):
        blocks.append(
            f"Configuration {number} (seed 0, tolerance 1 point):\n\n```text\n{plan['text']}\n```"
        )
    return "\n\n" + "\n\n".join(blocks) + "\n\n"


def _history(results: Results, name: str) -> list[dict]:
    return results.json(PART / "runs" / f"{name}.json")["history"]


def _accuracy_at(history: list[dict], epoch: float) -> float:
    return float(next(r for r in history if r["epoch"] >= epoch)["val_accuracy"])


def scored(results: Results) -> list[Scored]:
    """The configurations with both runs of at least one seed stored, scored."""
    found = []
    for number, records in by_configuration(results.json(PART / "forecasts.json")).items():
        measured, kept, costs = [], [], []
        for r in records:
            try:
                run = _history(results, f"{number}-s{r['seed']}")
                single = _history(results, f"{number}-single-s{r['seed']}")
            except MissingSource:
                continue
            epoch = r["epochs"]
            measured.append(100 * (_accuracy_at(single, epoch) - _accuracy_at(run, epoch)))
            kept.append(r)
            costs.append(_cost(run, single))
        if not kept:
            continue
        gap, low, high = (statistics.fmean(r[k] for r in kept) for k in ("gap", "low", "high"))
        found.append(
            Scored(
                kept[0]["config"],
                gap,
                low,
                high,
                measured=statistics.fmean(measured),
                seeds=len(kept),
                misses=tuple(r["gap"] - m for r, m in zip(kept, measured, strict=True)),
                cost=(statistics.fmean(c[0] for c in costs), statistics.fmean(c[1] for c in costs)),
            )
        )
    if not found:
        raise MissingSource("part k: no configuration's runs are stored yet")
    return found


def _cost(run: list[dict], single: list[dict]) -> tuple[float, float]:
    """(both pilots, the one worker's) seconds over the run's: a pilot is its run's first
    epochs up to the pilots' epoch."""
    pilot = sum(r["seconds"] for r in run if r["epoch"] <= PILOT_EPOCHS)
    alone = sum(r["seconds"] for r in single if r["epoch"] <= PILOT_EPOCHS)
    whole = sum(r["seconds"] for r in run)
    return (pilot + alone) / whole, alone / whole


def _rms(results: Results, tables: str) -> str:
    if tables != "skewed":
        raise MissingSource("forecast/rms: only skewed")
    misses = [m for s in scored(results) if s.config["alpha"] is not None for m in s.misses]
    if not misses:
        raise MissingSource("part k: no skewed configuration scored yet")
    return f"{statistics.fmean(m * m for m in misses) ** 0.5:.2f}"


def _cost_range(results: Results) -> str:
    found = scored(results)
    both = [100 * s.cost[0] for s in found]
    alone = [100 * s.cost[1] for s in found]
    return (
        f"{min(both):.0f}–{max(both):.0f} % (the one worker's alone {min(alone):.0f}–"
        f"{max(alone):.0f} %)"
    )


def _score(results: Results) -> str:
    lines = [
        "| # | model, optimizer | K | table | rule | forecast [90 %] | measured | holds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in scored(results):
        cells = [
            str(s.config["number"]),
            *describe(s.config),
            f"{s.gap:.2f} [{s.low:.2f}, {s.high:.2f}]",
            f"{s.measured:.2f} ({s.seeds} seed{'s' if s.seeds > 1 else ''})",
            "yes" if s.held else "no",
        ]
        lines.append("| " + " | ".join(cells).replace("-", "−") + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def _held(results: Results) -> str:
    found = scored(results)
    return f"{sum(s.held for s in found)} of {len(found)}"


def _mae(results: Results, tables: str) -> str:
    iid = tables == "iid"
    errors = [
        abs(s.gap - s.measured) for s in scored(results) if (s.config["alpha"] is None) == iid
    ]
    if not errors:
        raise MissingSource(f"part k: no {tables} configuration scored yet")
    return f"{statistics.fmean(errors):.2f}"


def _forecast(results: Results, what: str, *arguments: str) -> str:
    texts: dict[str, Callable[..., str]] = {
        "table": _table,
        "plans": _plans,
        "score": _score,
        "held": _held,
        "mae": _mae,
        "rms": _rms,
        "cost": _cost_range,
    }
    if what not in texts:
        raise MissingSource(f"forecast: no {what!r}: {', '.join(texts)}")
    return texts[what](results, *arguments)


COMPUTATIONS: dict[str, Callable[..., str]] = {"forecast": _forecast}
