"""The study's computations that are neither one setting against another (``gpcnn.study.doc_facts``)
nor seconds per epoch (``doc_seconds``) nor the early warning (``doc_warning``): part h's hopper,
part j's fit of the gap against K, the drift ratio, the loading benchmark; and ``facts``, every key's text for
``gpcnn.study.doc_numbers``, the rule registry's (``rule_docs``) included.

``hopper/first-to-90``
    in how many of part h's configurations the hopper reaches 90 % before both merges, by the
    study's rule on the seeds' epochs to 90 % (a lead is real only beyond twice its standard error).
``hopper/ahead/EPOCH/MERGE``
    the range over the configurations of the hopper's lead on MERGE at EPOCH, in points (0 decimals
    at epoch 1, else 1), and ``hopper/real/EPOCH/MERGE`` in how many configurations it is real.
``hopper/range/EPOCH/METHOD``
    the range over part h's configurations of METHOD's (``hopper``, ``average``, ``bmuf``) mean
    validation accuracy at EPOCH, 2 decimals.
``fit/HOW/RULE-mM/K/FORM``
    the gap to one worker at epoch 15 predicted for K by ``gap(K) = a (K - 1)^p`` fitted on the IID
    runs of parts a and f at K <= 8 (``gpcnn.fit.forecast.gap_law``), the rule's own exponent
    (HOW ``alone``: ``fit_gap_model``) or one shared by part j's three settings (``shared``:
    ``fit_gap_models``); FORM ``value``, ``interval`` (its 90 % interval for 2 seeds), ``p``,
    ``a``, ``residual`` (the residuals' sd), ``points`` (each seed's gap fitted on, by K) or
    ``score`` (whether part j's measured mean is inside). ``measured/RULE-mM/K``: that
    mean, the gap to the mean of the one-worker runs, 2 decimals. ``fit/held``: how many of the
    shared fit's intervals at K = 2 and 16 hold the measured mean.
``drift/PART/RULE``
    the range over the part's runs of RULE (``all``: every run) of the mean drift ratio of epochs
    1 to 3, 2 decimals; a sub-folder of a part is written with a dot (``j.early``).
``loading/skew-share``, ``loading/seconds/ROW``
    ``bench/results/loading.json``: the label-skew count's share of ``load_images`` at K = 2 (the
    median of the paired rounds' ratios), and a row's median seconds (2 decimals).
``sweep/OPTIMIZER/RATE``
    the learning-rate sweep's score of a rate (``report.sweep_score``: one worker's mean validation
    accuracy over its last 2 epochs), 4 decimals.
``skew/TABLE/FIELD``
    the label skew (``max`` or ``mean``) of Fashion-MNIST's training labels as ``load_images``
    deals them (``dealt_skew``): ``iid-SEED`` or ``alphaA-SEED`` at K = 4, 3 decimals; ``iid-N-K``,
    the first N images over K segments (seed 0), 2 decimals.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from gpcnn.data.dealing import class_counts, deal
from gpcnn.data.labelled import DatasetError
from gpcnn.data.mnist import load_fashion_mnist
from gpcnn.engines.label_skew_sql import SkewIndex, skew_index
from gpcnn.fit.forecast import gap_law
from gpcnn.study import doc_facts, doc_forecast, doc_seconds, doc_warning, report, rule_docs
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_results import STUDY, Results

LOADING = Path("bench/results/loading.json")
# The loading benchmark's rows by a short name (its table names them in prose).
LOADING_ROWS = {
    "load-k2": "`gpcnn.load_images`, K = 2",
    "skew-count-k2": "the label-skew count alone, K = 2",
    "pack-k2": "`gpcnn.pack_table`, K = 2",
    "pack-label-k2": "`gpcnn.pack_table`, K = 2, `distribute_by='label'`",
    "redeal-k2": "`gpcnn.redeal` of that table, K = 2",
    "pack-shared-k2": "`gpcnn.pack_table`, K = 2, `shared_sample=0.05`",
}
FIT_PARTS = ("a", "f")  # what part j's prediction was fitted on, before its runs
FIT_EPOCH, FIT_MAX_K, LEVEL, SEEDS = 15.0, 8, 0.9, 2
FIT_SETTINGS = ("average-m1", "bmuf-m1", "bmuf-m4")  # part j's, as RULE-mM


def _configurations(results: Results) -> list[str]:
    return sorted({name.split("@")[1] for name in results.part("h")})


def _first_to_90(results: Results) -> str:
    def reached(name: str) -> list[float]:
        found = [report.epochs_to(h, 0.9) for h in results.setting("h", name)]
        return [e for e in found if e is not None]

    first, level = 0, []
    for configuration in _configurations(results):
        hopper = reached(f"hopper@{configuration}")
        merges = {m: reached(f"{m}@{configuration}") for m in ("average", "bmuf")}
        best = min(merges, key=lambda m: statistics.fmean(merges[m]))
        lead, _, verdict = report.difference(merges[best], hopper)
        if lead > 0 and verdict == "real":
            first += 1
        else:
            level.append(
                f"{configuration}: {statistics.fmean(hopper):.1f} epochs against `{best}`'s "
                f"{statistics.fmean(merges[best]):.1f}"
            )
    total = first + len(level)
    if not level:
        return f"in every configuration ({total} of {total}, each lead real)"
    return (
        f"in {first} of the {total} configurations (each lead real), within noise of a merge "
        f"in the others ({'; '.join(level)})"
    )


def _hopper_range(results: Results, epoch: str, method: str) -> str:
    """The range over part h's configurations of a method's mean accuracy at ``epoch``."""
    means = [
        statistics.fmean(results.values("h", f"{method}@{c}", float(epoch)))
        for c in _configurations(results)
    ]
    return f"{min(means):.2f}–{max(means):.2f}"


def _hopper_leads(results: Results, epoch: str, merge: str) -> list[tuple[float, str]]:
    leads = []
    for configuration in _configurations(results):
        diff, _, verdict = report.difference(
            results.values("h", f"hopper@{configuration}", float(epoch)),
            results.values("h", f"{merge}@{configuration}", float(epoch)),
        )
        leads.append((100 * diff, verdict))
    return leads


def _ahead(results: Results, epoch: str, merge: str) -> str:
    leads = [lead for lead, _ in _hopper_leads(results, epoch, merge)]
    digits = 0 if float(epoch) == 1 else 1
    return f"{min(leads):.{digits}f}–{max(leads):.{digits}f}"


def _real(results: Results, epoch: str, merge: str) -> str:
    leads = _hopper_leads(results, epoch, merge)
    return f"{sum(verdict == 'real' for _, verdict in leads)} of {len(leads)}"


def _iid_rows(results: Results, parts: tuple[str, ...]) -> list[dict]:
    """The IID history rows of ``parts``, a run found in two parts counted once (as
    part j's prediction was fitted on them)."""
    rows, seen = [], set()
    for part in parts:
        for histories in results.part(part).values():
            for row in (r for h in histories for r in h):
                if row.get("skew") is None and (row["run"], row["iteration"]) not in seen:
                    seen.add((row["run"], row["iteration"]))
                    rows.append(row)
    return rows


def _gaps(results: Results, parts: tuple[str, ...]) -> dict[str, gap_law.GapPoints]:
    found = gap_law.gap_points(_iid_rows(results, parts), FIT_EPOCH)
    return {f"{p.rule}-m{p.merges_per_epoch:g}": p for p in found if not p.early_merges}


def _fitted_on(results: Results, setting: str) -> gap_law.GapPoints:
    points = _gaps(results, FIT_PARTS).get(setting)
    if points is None:
        raise MissingSource(f"parts {', '.join(FIT_PARTS)} have no IID {setting}")
    gaps = {k: g for k, g in points.gaps.items() if k <= FIT_MAX_K}
    return gap_law.GapPoints(points.rule, points.merges_per_epoch, gaps)


def _measured_mean(results: Results, setting: str, k: int) -> float:
    gaps = _gaps(results, (*FIT_PARTS, "j")).get(setting, gap_law.GapPoints("", 1, {})).gaps
    if k not in gaps:
        raise MissingSource(f"no measured {setting} at K = {k}")
    return statistics.fmean(gaps[k])


def _fit(results: Results, how: str, setting: str, k: str, form: str) -> str:
    if how == "alone":
        model = gap_law.fit_gap_model(_fitted_on(results, setting))
    elif how == "shared":
        models = gap_law.fit_gap_models([_fitted_on(results, s) for s in FIT_SETTINGS])
        model = models[FIT_SETTINGS.index(setting)]
    else:
        raise MissingSource(f"fit/{how}: alone or shared")
    value, low, high = model.predict(int(k), seeds=SEEDS, level=LEVEL)
    texts = {
        "value": lambda: f"{value:.2f}",
        "interval": lambda: f"{value:.2f} [{low:.2f}, {high:.2f}]".replace("-", "−"),
        "p": lambda: f"{model.p:g}",
        "a": lambda: f"{model.a:.3f}",
        "residual": lambda: f"{model.residual_sd:.2f}",
        "points": lambda: "; ".join(
            f"{k}: " + ", ".join(f"{g:.2f}" for g in gaps) for k, gaps in model.points.gaps.items()
        ).replace("-", "−"),
        "score": lambda: (
            "inside" if low <= _measured_mean(results, setting, int(k)) <= high else "outside"
        ),
    }
    if form not in texts:
        raise MissingSource(f"fit: no form {form!r}: {', '.join(texts)}")
    return texts[form]()


def _held(results: Results) -> str:
    """How many of part j's predictions (the shared fit, K = 2 and 16) held."""
    models = gap_law.fit_gap_models([_fitted_on(results, s) for s in FIT_SETTINGS])
    held = total = 0
    for setting, model in zip(FIT_SETTINGS, models, strict=True):
        for k in (2, 16):
            _, low, high = model.predict(k, seeds=SEEDS, level=LEVEL)
            held += low <= _measured_mean(results, setting, k) <= high
            total += 1
    return f"{held} of {total}"


def _measured(results: Results, setting: str, k: str) -> str:
    return f"{_measured_mean(results, setting, int(k)):.2f}".replace("-", "−")


def _drift(results: Results, part: str, rule: str) -> str:
    early = [
        statistics.fmean(r["drift_ratio"] for r in h if r["epoch"] <= 3)
        for histories in results.part(part).values()
        for h in histories
        if h[0].get("drift_ratio") is not None and rule in ("all", h[0]["merge"])
    ]
    if not early:
        raise MissingSource(f"part {part} has no {rule} run with the diagnostics")
    return f"{min(early):.2f}–{max(early):.2f}"


def _loading(results: Results, what: str, row: str | None = None) -> str:
    seconds = results.json(LOADING)["data"]["seconds"]
    if what == "skew-share":
        count, load = seconds[LOADING_ROWS["skew-count-k2"]], seconds[LOADING_ROWS["load-k2"]]
        ratios = [c / t for c, t in zip(count, load, strict=True)]
        return f"{100 * statistics.median(ratios):.1f} %"
    if what == "seconds" and row is not None and LOADING_ROWS.get(row) in seconds:
        return f"{statistics.median(seconds[LOADING_ROWS[row]]):.2f}"
    raise MissingSource(f"loading/{what}/{row}: no such row in {LOADING}")


def _sweep(results: Results, optimizer: str, rate: str) -> str:
    """The sweep's score of ``optimizer`` at learning rate ``rate`` (``report.sweep_score``)."""
    rows = report.read_csv(results.file(STUDY / "sweep" / f"{optimizer}-lr{rate}" / "history.csv"))
    return f"{report.sweep_score(rows):.4f}"


def dealt_skew(y: np.ndarray, segments: int, seed: int, alpha: float | None = None) -> SkewIndex:
    """The label skew of ``y`` as ``load_images`` deals it over ``segments`` (IID, or Dirichlet
    ``alpha``) for ``seed``: what the catalog would measure, without a database."""
    distribution = "iid" if alpha is None else "label-skew"
    order, counts = deal(y, segments, seed, distribution, alpha)
    return skew_index(class_counts(y, order, counts, int(y.max()) + 1))


@cache
def _fashion_labels() -> np.ndarray:
    try:
        return load_fashion_mnist().y_train
    except DatasetError as error:
        raise MissingSource(f"Fashion-MNIST: {error}") from None


def _skew(results: Results, table: str, field: str) -> str:
    """``table``: ``iid-SEED``, ``alphaA-SEED`` (K = 4, all 60,000 images) or ``iid-N-K`` (the
    first N images over K segments, seed 0); ``field``: ``max`` or ``mean``, 3 decimals (2 for
    the small tables)."""
    kind, *numbers = table.split("-")
    y = _fashion_labels()
    if len(numbers) == 2:
        found, digits = dealt_skew(y[: int(numbers[0])], int(numbers[1]), 0), 2
    else:
        alpha = None if kind == "iid" else float(kind.removeprefix("alpha"))
        found, digits = dealt_skew(y, 4, int(numbers[0]), alpha), 3
    return f"{getattr(found, field):.{digits}f}"


SOURCES: dict[str, Callable[..., str]] = {
    "hopper/first-to-90": _first_to_90,
    "hopper/ahead": _ahead,
    "hopper/real": _real,
    "hopper/range": _hopper_range,
    "fit/held": _held,
    "fit": _fit,
    "measured": _measured,
    "drift": _drift,
    "loading": _loading,
    "sweep": _sweep,
    "skew": _skew,
}


COMPUTATIONS = {
    **doc_facts.COMPUTATIONS,
    **doc_seconds.COMPUTATIONS,
    **doc_warning.COMPUTATIONS,
    **doc_forecast.COMPUTATIONS,
}


def computed(results: Results, key: str) -> str:
    """What ``key`` renders to, from ``results``; ``MissingSource`` if it cannot be computed."""
    name, *arguments = key.split("/")
    if name not in COMPUTATIONS:
        raise MissingSource(f"{key}: no computation {name!r}")
    try:
        return COMPUTATIONS[name](results, *arguments)
    except (TypeError, ValueError) as error:  # the wrong number of arguments, a bad epoch
        raise MissingSource(f"{key}: {error}") from None


def facts(root: Path) -> Callable[[str], str]:
    """Key -> its text, from the stored results under the repository's ``root`` (each computed
    once); ``MissingSource`` for a key no computation knows or whose results are missing."""
    results = Results(root)

    @cache
    def fact(key: str) -> str:
        if key in rule_docs.NAMED:
            return rule_docs.NAMED[key]()
        for name, compute in SOURCES.items():
            if key == name or key.startswith(name + "/"):
                arguments = key[len(name) + 1 :].split("/") if key != name else []
                try:
                    return compute(results, *arguments)
                except (TypeError, ValueError) as error:
                    raise MissingSource(f"{key}: {error}") from None
        return computed(results, key)

    return fact
