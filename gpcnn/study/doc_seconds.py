"""What each key of a marked number (``gpcnn.study.doc_numbers``) computes from the study's timing
runs: ``docs/img/study/seconds-FILE.json``, the seconds per epoch of each setting (the median of
interleaved rounds, and each round's), read by ``gpcnn.study.doc_results``.

``sec/FILE/SETTING[/REFERENCE[/ROUND]]``
    the median seconds per epoch, 1 decimal; with a reference, the setting's extra time over it in
    percent, signed, 1 decimal; with a round (from 1), that round's seconds instead of the median
    (``sec/FILE/SETTING/-/ROUND``: the round's own seconds).
``rounds/FILE/SETTING``
    the median seconds per epoch and the range of the rounds, 1 decimal.
``times/FILE/SETTING/REFERENCE``
    how many times the reference's seconds per epoch the setting's are, 1 decimal.
``extra-merge/FILE/SETTING/REFERENCE``
    the seconds one more merge per epoch costs: the two settings' difference over the difference
    of their merges per epoch (the ``m`` token of the name), 1 decimal.
``minutes/PART/SETTING/TARGET/FILE``
    the mean over the seeds that reach TARGET of their epochs to it times the setting's median
    seconds per epoch in ``seconds-FILE.json``, in minutes, 1 decimal.
``time/PART/SETTING/TARGET/FILE[/DIGITS]``
    each seed's epochs to TARGET times the setting's median seconds per epoch, in minutes, mean ±
    sd over the seeds that reach it (DIGITS decimals, 1 unless given).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from gpcnn.study import report
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_results import STUDY, Results, short_name


def _seconds(results: Results, file, setting, reference=None, round_=None) -> str:
    seconds = results.seconds(file, None if round_ is None else int(round_))
    reference = None if reference == "-" else reference
    missing = [s for s in (setting, reference) if s is not None and s not in seconds]
    if missing:
        raise MissingSource(f"seconds-{file}.json has no {', '.join(missing)}")
    if reference is None:
        return f"{seconds[setting]:.1f}"
    return f"{100 * (seconds[setting] / seconds[reference] - 1):+.1f} %".replace("-", "−")


def _rounds(results: Results, file, setting) -> str:
    """The median seconds per epoch and the range of the rounds."""
    rounds = results.json(STUDY / f"seconds-{file}.json")["seconds"]
    found = {short_name({"setting": name}): values for name, values in rounds.items()}
    if setting not in found:
        raise MissingSource(f"seconds-{file}.json has no {setting}")
    values = found[setting]
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def _times(results: Results, file, setting, reference) -> str:
    seconds = results.seconds(file)
    if setting not in seconds or reference not in seconds:
        raise MissingSource(f"seconds-{file}.json: no {setting} against {reference}")
    return f"{seconds[setting] / seconds[reference]:.1f}"


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


def _minutes(results: Results, part, setting, target, file) -> str:
    seconds = results.seconds(file)
    found = [report.epochs_to(h, float(target)) for h in results.setting(part, setting)]
    reached = [e for e in found if e is not None]
    if setting.split(":")[-1] not in seconds or not reached:
        raise MissingSource(f"{part}:{setting}: no time to {target} with seconds-{file}.json")
    return f"{statistics.fmean(reached) * seconds[setting.split(':')[-1]] / 60:.1f}"


def _time(results: Results, part, setting, target, file, digits="1") -> str:
    """Minutes to ``target``, mean ± sd over the seeds that reach it."""
    seconds = results.seconds(file)
    name = setting.split(":")[-1]
    found = [report.epochs_to(h, float(target)) for h in results.setting(part, setting)]
    minutes = [e * seconds[name] / 60 for e in found if e is not None and name in seconds]
    if not minutes:
        raise MissingSource(f"{part}:{setting}: no time to {target} with seconds-{file}.json")
    return report.cell(minutes, int(digits))


COMPUTATIONS: dict[str, Callable[..., str]] = {
    "sec": _seconds,
    "rounds": _rounds,
    "times": _times,
    "extra-merge": _extra_merge,
    "minutes": _minutes,
    "time": _time,
}
