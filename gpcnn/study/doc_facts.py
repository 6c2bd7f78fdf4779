"""What each key of a marked number (``gpcnn.study.doc_numbers``) computes, from the stored results.

A key is a computation and its arguments, separated by ``/``. A part is a folder of
``docs/img/study/`` and its ``history.csv``; a setting is named by its short name, the setting's
name without the dataset and the tokens every part shares (``short_name``: ``single-k1``,
``average-k4-os-local``, ``scaffold-k4-gn-os-local-skew0.1``; part h's add ``@`` and the
configuration); a setting of another part is ``PART:SETTING``. Every statistic is
``gpcnn.study.report``'s: the mean over seeds, the difference of two settings' means with its
standard error, and the study's rule, *real* only when the difference exceeds twice that standard
error, else *within noise*.

``acc/PART/SETTING/EPOCH``
    mean validation accuracy over the seeds, 4 decimals.
``cell/PART/SETTING/EPOCH``
    mean ± sd over the seeds (``report.cell``: 4 decimals; the mean alone for one seed).
``window/PART/SETTING/FIRST/LAST``
    the mean over seeds of each seed's mean accuracy over epochs FIRST to LAST, 4 decimals.
``gap/PART/SETTING/REFERENCE/EPOCH/FORM``
    the setting's mean validation accuracy minus the reference's, in points (× 100), as FORM:
    ``pts`` its size with 1 decimal, ``pts2`` with 2, ``pm`` signed with ± twice the standard
    error (2 decimals), ``pmv`` that and the verdict in brackets, ``verdict`` the rule's word,
    ``says`` "within noise of" or "X points below" / "above" (1 decimal: the verdict decides
    which).
``epochs/PART/SETTING/TARGET``
    mean epochs to TARGET validation accuracy over the seeds that reached it, 1 decimal.
``runs/PART``, ``seeds/PART/SETTING``
    how many runs the part's history holds; how many seeds the setting has.
``sec/FILE/SETTING[/REFERENCE[/ROUND]]``
    ``docs/img/study/seconds-FILE.json``'s median seconds per epoch, 1 decimal; with a reference,
    the setting's extra time over it in percent, signed, 1 decimal; with a round (from 1), that
    round's seconds instead of the median.
``times/FILE/SETTING/REFERENCE``
    how many times the reference's seconds per epoch the setting's are, 1 decimal.
``minutes/PART/SETTING/TARGET/FILE``
    the mean over the seeds that reach TARGET of their epochs to it times the setting's median
    seconds per epoch in ``seconds-FILE.json``, in minutes, 1 decimal.
``spread/PART/EPOCH/SETTING+SETTING+...``
    the largest minus the smallest of the settings' mean accuracies, in points, 1 decimal.
``extra-merge/FILE/SETTING/REFERENCE``
    the seconds one more merge per epoch costs: the two settings' difference over the difference
    of their merges per epoch (the ``m`` token of the name), 1 decimal.

The study's other computations (part h's hopper, part j's fit, the drift ratio, the benchmarks'
timings, the rule registry) are named keys of ``gpcnn.study.doc_sources``.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from gpcnn.study import report
from gpcnn.study.doc_numbers import MissingSource

STUDY = Path("docs/img/study")
DATASETS = ("fashion-mnist-", "mnist-sample-")
# Tokens of a setting's name that every part shares (the study's defaults): left out of short names.
COMMON = {"m1", "shuffled", "bn", "cnn", "momentum"}


def short_name(first_row: dict) -> str:
    """A setting's short name, from its first history row."""
    name = first_row["setting"]
    for prefix in DATASETS:
        name = name.removeprefix(prefix)
    if first_row.get("configuration"):  # part h: the hopper's configurations share one setting
        return f"{first_row['merge']}@{first_row['configuration']}"
    return "-".join(t for t in name.split("-") if t not in COMMON)


class Results:
    """The stored results under a repository's ``root``, each file read once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._parts: dict[str, dict[str, list[list[dict]]]] = {}
        self._json: dict[str, dict] = {}

    def file(self, relative: str | Path) -> Path:
        path = self.root / relative
        if not path.is_file():
            raise MissingSource(f"{relative} is not there")
        return path

    def json(self, relative: str | Path) -> dict:
        key = str(relative)
        if key not in self._json:
            self._json[key] = json.loads(self.file(relative).read_text())
        return self._json[key]

    def part(self, part: str) -> dict[str, list[list[dict]]]:
        """Short setting name -> one history per seed, of part ``part``."""
        if part not in self._parts:
            rows = report.read_csv(self.file(STUDY / part / "history.csv"))
            grouped: dict[str, list[list[dict]]] = {}
            for setting, histories in report.settings(_by_configuration(rows)).items():
                short = short_name(histories[0][0])
                if short in grouped:  # two settings would be mixed under one key
                    raise ValueError(f"part {part}: {setting} is {short} too")
                grouped[short] = histories
            self._parts[part] = grouped
        return self._parts[part]

    def setting(self, part: str, setting: str) -> list[list[dict]]:
        """The histories of ``setting`` (``PART:SETTING`` names another part's)."""
        if ":" in setting:
            part, setting = setting.split(":", 1)
        found = self.part(part)
        if setting not in found:
            raise MissingSource(
                f"part {part} has no setting {setting!r}: it has {', '.join(found)}"
            )
        return found[setting]

    def values(self, part: str, setting: str, epoch: float) -> list[float]:
        """Each seed's validation accuracy at ``epoch``."""
        found = [report.at_epoch(h, epoch, "val_accuracy") for h in self.setting(part, setting)]
        values = [v for v in found if v is not None]
        if not values:
            raise MissingSource(f"{part}:{setting} has no epoch {epoch:g}")
        return values

    def seconds(self, file: str, round_: int | None = None) -> dict[str, float]:
        """Short setting name -> seconds per epoch in ``seconds-FILE.json``: the median over its
        rounds, or round ``round_``'s (from 1)."""
        stored = self.json(STUDY / f"seconds-{file}.json")
        if round_ is None:
            found = stored["median"]
        else:
            found = {name: rounds[round_ - 1] for name, rounds in stored["seconds"].items()}
        return {short_name({"setting": name}): value for name, value in found.items()}


def _by_configuration(rows: list[dict]) -> list[dict]:
    """Part h's rows with each configuration a setting of its own (one setting per rule there)."""
    return [
        {
            **row,
            "run": f"{row['run']}@{row['configuration']}",
            "setting": f"{row['setting']}@{row['configuration']}",
        }
        if row.get("configuration")
        else row
        for row in rows
    ]


def points(value: float, digits: int = 1) -> str:
    """A difference in points, as its size (the prose says which way)."""
    return f"{abs(value):.{digits}f}"


def signed(value: float, digits: int = 2) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def gap_text(diff: float, se: float | None, verdict: str, form: str) -> str:
    """One difference of means (in points) in the ``form`` the key asks for."""
    if form == "pts":
        return points(diff)
    if form == "pts2":
        return points(diff, 2)
    if form == "verdict":
        return verdict
    if form == "pm":
        return signed(diff) + ("" if se is None else f" ± {2 * se:.2f}")
    if form == "pmv":
        return f"{gap_text(diff, se, verdict, 'pm')} ({verdict})"
    if form == "says":
        if verdict == "within noise":
            return "within noise of"
        return f"{points(diff)} points {'below' if diff < 0 else 'above'}"
    raise MissingSource(f"no form {form!r}: pts, pts2, pm, pmv, verdict or says")


def _gap(results: Results, part, setting, reference, epoch, form) -> str:
    epoch = float(epoch)
    diff, se, verdict = report.difference(
        results.values(part, setting, epoch), results.values(part, reference, epoch)
    )
    return gap_text(100 * diff, None if se is None else 100 * se, verdict, form)


def _acc(results: Results, part, setting, epoch) -> str:
    return f"{statistics.fmean(results.values(part, setting, float(epoch))):.4f}"


def _cell(results: Results, part, setting, epoch) -> str:
    return report.cell(results.values(part, setting, float(epoch)))


def _window(results: Results, part, setting, first, last) -> str:
    """The mean over seeds of each seed's mean accuracy over epochs ``first`` to ``last``."""
    epochs = range(int(first), int(last) + 1)
    means = [
        statistics.fmean(results.values(part, setting, e)[i] for e in epochs)
        for i in range(len(results.setting(part, setting)))
    ]
    return f"{statistics.fmean(means):.4f}"


def _epochs(results: Results, part, setting, target) -> str:
    found = [report.epochs_to(h, float(target)) for h in results.setting(part, setting)]
    reached = [e for e in found if e is not None]
    if not reached:
        raise MissingSource(f"{part}:{setting} never reaches {target}")
    return f"{statistics.fmean(reached):.1f}"


def _seconds(results: Results, file, setting, reference=None, round_=None) -> str:
    seconds = results.seconds(file, None if round_ is None else int(round_))
    missing = [s for s in (setting, reference) if s is not None and s not in seconds]
    if missing:
        raise MissingSource(f"seconds-{file}.json has no {', '.join(missing)}")
    if reference is None:
        return f"{seconds[setting]:.1f}"
    return f"{100 * (seconds[setting] / seconds[reference] - 1):+.1f} %".replace("-", "−")


def _times(results: Results, file, setting, reference) -> str:
    seconds = results.seconds(file)
    if setting not in seconds or reference not in seconds:
        raise MissingSource(f"seconds-{file}.json: no {setting} against {reference}")
    return f"{seconds[setting] / seconds[reference]:.1f}"


def _minutes(results: Results, part, setting, target, file) -> str:
    seconds = results.seconds(file)
    found = [report.epochs_to(h, float(target)) for h in results.setting(part, setting)]
    reached = [e for e in found if e is not None]
    if setting.split(":")[-1] not in seconds or not reached:
        raise MissingSource(f"{part}:{setting}: no time to {target} with seconds-{file}.json")
    return f"{statistics.fmean(reached) * seconds[setting.split(':')[-1]] / 60:.1f}"


def _spread(results: Results, part, epoch, settings) -> str:
    means = [statistics.fmean(results.values(part, s, float(epoch))) for s in settings.split("+")]
    return points(100 * (max(means) - min(means)))


def merges_per_epoch(setting: str) -> int:
    """The merges per epoch in a short name (``m4``; none: once per epoch)."""
    found = re.search(r"(?:^|-)m(\d+)(?:-|$)", setting)
    return int(found[1]) if found else 1


def _extra_merge(results: Results, file, setting, reference) -> str:
    medians = results.seconds(file)
    extra = merges_per_epoch(setting) - merges_per_epoch(reference)
    if extra == 0 or setting not in medians or reference not in medians:
        raise MissingSource(f"seconds-{file}.json: no {setting} against {reference}")
    return f"{(medians[setting] - medians[reference]) / extra:.1f}"


def _runs(results: Results, part) -> str:
    return str(sum(len(histories) for histories in results.part(part).values()))


def _seeds(results: Results, part, setting) -> str:
    return str(len(results.setting(part, setting)))


COMPUTATIONS: dict[str, Callable[..., str]] = {
    "acc": _acc,
    "cell": _cell,
    "window": _window,
    "gap": _gap,
    "epochs": _epochs,
    "runs": _runs,
    "seeds": _seeds,
    "sec": _seconds,
    "times": _times,
    "minutes": _minutes,
    "spread": _spread,
    "extra-merge": _extra_merge,
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
