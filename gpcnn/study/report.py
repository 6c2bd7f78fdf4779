"""A study's outputs from its finished runs: history rows, the CSV, and report.md with mean ± sd
over seeds and the rule that says which differences are real.

A difference between two settings (means over their seeds) is called **real** only when it exceeds
twice the standard error of the difference of the means, sqrt(sd_a²/n_a + sd_b²/n_b); otherwise the
report says it is within noise, and with a single seed on either side that there is no error bar.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from gpcnn.fit.diagnostics import flat_row
from gpcnn.fit.forecast.gap_law import at_epoch, settings
from gpcnn.study.specs import RunSpec

REPORT_EPOCHS = (1, 5, 10, 15, 20)

CSV_FIRST = (
    "run",
    "setting",
    "dataset",
    "merge",
    "segments",
    "merges_per_epoch",
    "seed",
    "iteration",
    "epoch",
    "loss",
    "accuracy",
    "val_loss",
    "val_accuracy",
    "images",
    "seconds",
    "db_seconds",
)
TEXT_COLUMNS = (
    "run",
    "setting",
    "dataset",
    "merge",
    "model",
    "optimizer",
    "optimizer_state",
    "merge_options",
    "early_merges",
    "configuration",
    "distribute_by",
)

BOOL_COLUMNS = ("shuffle", "scale_lr", "from_table", "library_model")


def collect(out: str | Path, rules: Sequence[str]) -> list[dict]:
    """History rows of every finished run in ``out`` (a study may be run in parts), ordered by
    dataset, merge frequency, rule (in ``rules``' order), K, seed, iteration."""
    rows = []
    for path in sorted(Path(out, "runs").glob("*.json")):
        done = json.loads(path.read_text())
        spec = RunSpec(**done["spec"])
        meta = {
            **asdict(spec),
            "run": spec.name,
            "setting": spec.setting,
            # as text, so that rows read back from the CSV compare equal
            "merge_options": spec.options_text,
            "early_merges": "-".join(map(str, spec.early_merges)),
        }
        rows += [{**meta, **flat_row(row)} for row in done["history"]]
    order = {rule: i for i, rule in enumerate(rules)}
    return sorted(
        rows,
        key=lambda r: (
            r["dataset"],
            r["merges_per_epoch"],
            order[r["merge"]],
            r["segments"],
            r["setting"],
            r["seed"],
            r["iteration"],
        ),
    )


def collect_segments(out: str | Path) -> dict[str, dict]:
    """Setting -> its training table's images per segment and class mixes (seed 0's, else the
    first seed's), from the run files."""
    found: dict[str, dict] = {}
    for path in sorted(Path(out, "runs").glob("*.json")):
        done = json.loads(path.read_text())
        spec = RunSpec(**done["spec"])
        if "segments" in done and (spec.seed == 0 or spec.setting not in found):
            found[spec.setting] = done["segments"]
    return found


def write_csv(rows: Sequence[dict], path: Path) -> None:
    extra = sorted({k for row in rows for k in row} - set(CSV_FIRST))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*CSV_FIRST, *extra], restval="")
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    def value(key: str, text: str):
        if key in TEXT_COLUMNS:
            return text
        if key in BOOL_COLUMNS:
            return text == "True"
        return float(text) if text != "" else None

    with open(path, newline="") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


# -- statistics -----------------------------------------------------------------------------------


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


SWEEP_EPOCHS = 2  # a learning rate's score: its last epochs' mean (one moves a point or more)


def sweep_score(history: Sequence[dict]) -> float:
    """A learning rate's score in the sweep: one worker's mean validation accuracy over its last
    ``SWEEP_EPOCHS`` epochs."""
    last = sorted(history, key=lambda r: r["epoch"])[-SWEEP_EPOCHS:]
    return sum(r["val_accuracy"] for r in last) / len(last)


def epochs_to(history: Sequence[dict], target: float) -> float | None:
    """The first epoch at which validation accuracy reached ``target`` (None: never)."""
    return next(
        (r["epoch"] for r in history if (r.get("val_accuracy") or 0) >= target),
        None,
    )


def difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float | None, str]:
    """mean(a) − mean(b), the standard error of that difference, and the verdict."""
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    if sa is None or sb is None:
        return ma - mb, None, "one seed: no error bar"
    se = math.sqrt(sa**2 / len(a) + sb**2 / len(b))
    return ma - mb, se, "real" if abs(ma - mb) > 2 * se else "within noise"


def cell(values: Sequence[float], digits: int = 4) -> str:
    """Mean ± sd of ``values`` with ``digits`` decimals (the mean alone for one; "" for none)."""
    if not values:
        return ""
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f}" if sd is None else f"{mean:.{digits}f} ± {sd:.{digits}f}"


# -- report.md ------------------------------------------------------------------------------------


def report(
    rows: Sequence[dict],
    target: float | None = None,
    segments: dict[str, dict] | None = None,
    seconds: dict[str, float] | None = None,
) -> str:
    """Validation accuracy and loss per setting at epochs 1, 5, 10, 15, 20 and the last (mean ± sd
    over seeds), each setting's gap to one worker with its verdict, epochs to ``target`` (and the
    time to it, given each setting's ``seconds`` per epoch), and the segments (sizes and class
    mixes, from ``collect_segments``) of label-skewed settings."""
    grouped = settings(rows)
    last = max((r["epoch"] for r in rows), default=0)
    epochs = [e for e in REPORT_EPOCHS if e < last] + [last]
    header = "| setting | seeds | " + " | ".join(f"epoch {e:g}" for e in epochs) + " |"
    rule = "|---|---|" + "---|" * len(epochs)
    lines = ["# Convergence study", ""]
    for metric in ("val_accuracy", "val_loss"):
        lines += [f"## {metric} (mean ± sd over seeds)", "", header, rule]
        for name, histories in grouped.items():
            cells = [_values(histories, e, metric) for e in epochs]
            lines.append(f"| {name} | {len(histories)} | " + " | ".join(map(cell, cells)) + " |")
        lines.append("")
    lines += _gaps(grouped, epochs)
    if target is not None:
        lines += _targets(grouped, target, seconds or {})
    measured = segments or {}
    skewed = {
        name: measured[name]
        for name, histories in grouped.items()
        if histories[0][0].get("skew") is not None and name in measured
    }
    if skewed:
        lines += _segments(skewed)
    return "\n".join(lines) + "\n"


def _segments(skewed: dict[str, dict]) -> list[str]:
    lines = ["## Segments of label-skewed settings (images, and images per class)", ""]
    for name, info in skewed.items():
        lines.append(f"- {name}:")
        mixes = info.get("class_counts") or [[] for _ in info["images_per_segment"]]
        for k, (size, mix) in enumerate(zip(info["images_per_segment"], mixes, strict=True)):
            lines.append(f"  - segment {k}: {size} images; per class {list(mix)}")
    return [*lines, ""]


def _values(histories, epoch: float, metric: str) -> list[float]:
    found = (at_epoch(h, epoch, metric) for h in histories)
    return [v for v in found if v is not None]


SINGLE_MATCHES = ("dataset", "shuffle", "model", "optimizer")
FREQUENCY = ("merges_per_epoch", "early_merges")
# The gap tables: what a setting is compared with, named; the fields that make a setting that
# reference; the fields a setting shares with its reference (compared by value, so a count read
# back from the CSV as 1.0 matches 1). One worker at the same merges per epoch if there is one,
# else at one merge per epoch (one worker's merges only cut its epoch).
COMPARISONS = (
    ("one worker", {"merge": "single"}, SINGLE_MATCHES),
    (
        "the average at the same K",
        {"merge": "average"},
        (*SINGLE_MATCHES, *FREQUENCY, "segments", "skew", "optimizer_state"),
    ),
    (
        "the local optimizer state",
        {"optimizer_state": "local"},
        (*SINGLE_MATCHES, *FREQUENCY, "merge", "merge_options", "segments", "skew"),
    ),
)


def _reference_of(histories, grouped, sets: dict, shares: Sequence[str]) -> str | None:
    """The setting that ``histories``' setting is compared with, or None (none there, or the
    setting is a reference itself); one at the same merge frequency first, then (for one
    worker) one at one merge per epoch."""
    first = histories[0][0]
    if all(first.get(field) == value for field, value in sets.items()):
        return None
    frequencies = [{f: first.get(f) for f in FREQUENCY}]
    if not set(FREQUENCY) <= set(shares):
        frequencies.append({"merges_per_epoch": 1, "early_merges": ""})
    for frequency in frequencies:
        for other, runs in grouped.items():
            theirs = runs[0][0]
            wanted = {**sets, **frequency, **{field: first.get(field) for field in shares}}
            if all(_same(theirs.get(field), value) for field, value in wanted.items()):
                return other
    return None


def _same(a: object, b: object) -> bool:
    """Equal values; a field missing (rows made before it existed) and an empty one agree."""
    return a == b or (a in (None, "") and b in (None, ""))


def _gaps(grouped, epochs) -> list[str]:
    """One table per comparison that has pairs: each setting's validation accuracy minus its
    reference's at the same epoch, with the verdict."""
    lines = [
        "## Gaps (val_accuracy − the reference's, at the same epoch)",
        "",
        "A gap is *real* only when it exceeds twice the standard error of the difference of the "
        "means; otherwise it is within noise.",
        "",
    ]
    for title, sets, shares in COMPARISONS:
        rows = []
        for name, histories in grouped.items():
            reference = _reference_of(histories, grouped, sets, shares)
            if reference is not None:
                cells = [_gap(histories, grouped[reference], e) for e in epochs]
                rows.append(f"| {name} | " + " | ".join(cells) + " |")
        if rows:
            header = "| setting | " + " | ".join(f"epoch {e:g}" for e in epochs) + " |"
            lines += [f"### Gap to {title}", "", header, "|---|" + "---|" * len(epochs)]
            lines += [*rows, ""]
    return lines


def _gap(histories, reference, epoch: float) -> str:
    mine = _values(histories, epoch, "val_accuracy")
    base = _values(reference, epoch, "val_accuracy")
    if not mine or not base:
        return ""
    diff, se, verdict = difference(mine, base)
    return f"{diff:+.4f}" + ("" if se is None else f" ± {2 * se:.4f}") + f" ({verdict})"


def _targets(grouped, target: float, seconds: dict[str, float]) -> list[str]:
    """Epochs to ``target``; with ``seconds`` (setting -> seconds per epoch, one timing run) also
    the time to it: each seed's epochs times the setting's seconds per epoch."""
    timed = ["s per epoch", "minutes to target"] if seconds else []
    lines = [
        f"## Epochs to {target:g} validation accuracy (mean ± sd over the seeds that reached it)",
        "",
        "| " + " | ".join(["setting", "reached", "epochs", *timed]) + " |",
        "|---|---|---|" + "---|" * len(timed),
    ]
    for name, histories in grouped.items():
        reached = [e for e in (epochs_to(h, target) for h in histories) if e is not None]
        cells = [name, f"{len(reached)} of {len(histories)}", cell(reached)]
        if seconds:
            per_epoch = seconds.get(name)
            minutes = [] if per_epoch is None else [e * per_epoch / 60 for e in reached]
            cells += ["–" if per_epoch is None else f"{per_epoch:.1f}", cell(minutes, 2) or "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]
