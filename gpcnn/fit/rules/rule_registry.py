"""The registry of merge rules: a rule's name -> its class (``register_rule``), and a rule made by
name with its options checked before any work (``check_options``, ``make_rule``).

Every list of rules (the estimator's check and docstring, the study, its plots, the command line)
is this registry's, in the order the rules were registered.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping

import numpy as np

from gpcnn.fit.rules.merge_rule import POOLED, SHARED_RANGES, MergeRule, Range
from gpcnn.kernel import local_steps
from gpcnn.kernel.averaging import Vector

RULES: dict[str, type[MergeRule]] = {}

ANY_REAL = Range("a finite real number", lambda x: True)


def register_rule(
    name: str, words: str | None = None
) -> Callable[[type[MergeRule]], type[MergeRule]]:
    """A class decorator: the rule is ``merge=name`` from now on.

    Parameters
    ----------
    name : str
        What ``merge=`` calls the rule. A name already taken is an error: ``unregister_rule`` it
        first.
    words : str, optional
        The rule in a figure's legend (its name if not given).

    Returns
    -------
    callable
        The decorator, which registers a ``MergeRule`` subclass and returns it unchanged.
    """

    def register(cls: type[MergeRule]) -> type[MergeRule]:
        if name in RULES:
            raise ValueError(f'merge="{name}" is registered already, as {RULES[name].__name__}')
        cls.words = words or name
        RULES[name] = cls
        return cls

    return register


def unregister_rule(name: str) -> type[MergeRule]:
    """Remove rule ``name`` (a plug-in's, e.g. when a test ends).

    Parameters
    ----------
    name : str
        A registered rule's name.

    Returns
    -------
    type[MergeRule]
        The rule's class.
    """
    return RULES.pop(name)


def state_layout(name: str | None) -> str | None:
    """What rule ``name``'s stored state holds, in words (None: no state, or no such rule)."""
    rule = None if name is None else RULES.get(name)
    return None if rule is None else rule.state_layout


def _show(value: object) -> str:
    """A value as the user wrote it: numbers plain (numpy's too), anything else quoted."""
    return str(value) if isinstance(value, numbers.Number) else repr(value)


def _checked(
    where: str, option: str, value: object, default: object, range_: Range
) -> float | bool | str:
    """One option as a Python bool, float (numpy scalars come in from arrays) or str (an option
    whose default is one), or the error. A bool is no number here: eta=True is a mistake, not 1."""
    head = f"{where}: {option}={_show(value)}"
    if isinstance(default, str):
        if not isinstance(value, str) or not range_.test(value):
            raise ValueError(f"{head} is not a choice: {option} must be {range_.allowed}")
        return str(value)
    if isinstance(default, bool):
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{head} is not a bool: {option} must be True or False")
        return bool(value)
    real = None if isinstance(value, bool | np.bool_) else value  # a bool is no number here
    try:
        number = float(real) if isinstance(real, numbers.Real) else math.nan
    except OverflowError:  # an int beyond any float: never in a range of floats
        raise ValueError(
            f"{head} is too large for a float: {option} must be {range_.allowed}"
        ) from None
    if not math.isfinite(number):
        raise ValueError(f"{head} is not a finite real number: {option} must be {range_.allowed}")
    if not range_.test(number):
        raise ValueError(
            f"{head} is out of range: {option} must be {range_.allowed}{range_.detail(value)}"
        )
    return number


def check_options(name: str, options: Mapping | None, segments: int) -> dict:
    """All options of rule ``name`` for K = ``segments``, checked and with the defaults filled in,
    so that a bad value fails before any work. The option names are the rule class's own fields."""
    where = f'merge="{name}"'
    if name not in RULES:
        raise ValueError(f"{where}: choose one of {', '.join(RULES)}")
    rule = RULES[name]
    defaults = rule.option_defaults(segments)
    ranges = {**SHARED_RANGES, **rule.option_ranges(segments)}
    given = dict(options or {})
    unknown = [option for option in given if option not in defaults]
    if unknown:
        bad = ", ".join(f"{option}={_show(given[option])}" for option in unknown)
        verb = "is not an option" if len(unknown) == 1 else "are not options"
        takes = f"takes {', '.join(defaults)}" if defaults else "takes no options"
        raise ValueError(f"{where}: {bad} {verb}: {name} {takes}")
    return {
        option: _checked(
            where, option, given.get(option, default), default, ranges.get(option, ANY_REAL)
        )
        for option, default in defaults.items()
    }


def make_rule(
    name: str,
    trainable: Vector,
    segments: int,
    *,
    statistics: tuple[np.ndarray, np.ndarray] | None = None,
    optimizer: Mapping | None = None,
    **options,
) -> MergeRule:
    """A rule by name with its options (every rule: batchnorm_statistics; bmuf: eta, zeta,
    nesterov; easgd: alpha, default 0.9/K; fedprox: mu; scaffold, fednova: server_lr; fedadam,
    fedyogi: server_lr, beta1, beta2, tau), checked by ``check_options``. ``statistics``: the
    positions of the model's BatchNorm moving means and variances
    (``gpcnn.kernel.layout.moving_statistics``), needed when they are pooled; ``optimizer``: what
    the segments train with, as Keras serializes it (FedNova reads its momentum)."""
    options = check_options(name, options, segments)
    rule = RULES[name](trainable=np.asarray(trainable, bool), **options)
    if statistics is not None:
        means, variances = statistics
        rule.statistics = (np.asarray(means, np.int64), np.asarray(variances, np.int64))
    if rule.batchnorm_statistics == POOLED and not rule.statistics[0].size:
        raise ValueError(
            f'merge="{name}": batchnorm_statistics="{POOLED}", but the model has no '
            "BatchNormalization moving statistics to pool"
        )
    rule.optimizer = None if optimizer is None else dict(optimizer)
    steps = rule.in_database()
    if not rule.per_segment and (local_steps.sends(steps) or local_steps.returns(steps)):
        raise TypeError(
            f'merge="{name}": its local steps {list(steps)} send or return extras of each '
            "segment's own, which needs per_segment = True"
        )
    return rule
