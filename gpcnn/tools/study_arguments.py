"""The values of the study commands' arguments, parsed and checked (argparse ``type=`` functions):
lists of integers, merge frequencies and schedules, a rule's options and their combinations, label
skews, shared-sample fractions, layouts, and choices from a list."""

from __future__ import annotations

import argparse
import itertools


def positive_int(text: str) -> int:
    """A count of at least 1 (iterations, a batch's images), refused before any work."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def schedules(text: str) -> list[int | list[int]]:
    """Merge frequencies, comma-separated; each a count or a schedule of counts per epoch
    written with slashes, the last repeating (``1,4,8/8/1``)."""
    try:
        found = [[int(m) for m in part.split("/")] for part in text.split(",") if part.strip()]
    except ValueError:
        found = []
    if not found or not all(m >= 1 for schedule in found for m in schedule):
        raise argparse.ArgumentTypeError(
            f"{text!r}: counts >= 1 separated by commas, a schedule with slashes (e.g. 1,4,8/8/1)"
        )
    return [schedule[0] if len(schedule) == 1 else schedule for schedule in found]


def merge_option(text: str) -> tuple[str, list[float | bool | str]]:
    """NAME=VALUE[,VALUE...]: a rule's option and the values to run it at (true/false, numbers,
    or words such as batchnorm_statistics=pooled)."""

    def value(word: str) -> float | bool | str:
        lowered = word.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        try:
            return float(word)
        except ValueError:
            if not lowered.isidentifier():
                raise
            return lowered

    name, sep, values = text.partition("=")
    try:
        parsed = [value(v) for v in values.split(",")]
    except ValueError:
        parsed = []
    if not sep or not name.strip() or not parsed:
        raise argparse.ArgumentTypeError(
            f"{text!r}: NAME=VALUE[,VALUE...], e.g. mu=0.01,0.1 or nesterov=false"
        )
    return name.strip(), parsed


def option_sets(given: list[tuple[str, list[float | bool | str]]]) -> list[dict]:
    """Every combination of the options' values (one empty set without options)."""
    names = [name for name, _ in given]
    products = itertools.product(*(values for _, values in given))
    return [dict(zip(names, values, strict=True)) for values in products]


def skews(text: str) -> list[float | None]:
    values: list[float | None] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            values.append(None if part == "iid" else float(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: iid or a Dirichlet alpha > 0") from None
        if values[-1] is not None and not values[-1] > 0:
            raise argparse.ArgumentTypeError(f"{part!r}: a Dirichlet alpha must be > 0")
    return values


def fractions(text: str) -> list[float | None]:
    values: list[float | None] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            values.append(None if part == "none" else float(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: none or a fraction 0 < p <= 0.5") from None
        if values[-1] is not None and not 0 < values[-1] <= 0.5:
            raise argparse.ArgumentTypeError(f"{part!r}: a fraction 0 < p <= 0.5")
    return values


def layouts(text: str) -> list[str | None]:
    values = [None if part == "iid" else part for part in (p.strip() for p in text.split(","))]
    if "" in values:
        raise argparse.ArgumentTypeError(f"{text!r}: iid or column names, comma-separated")
    return values


def choices(allowed):
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)}")
        return values

    return parse
