"""The client-side merge rules: how the K segment models of an iteration become the next model(s).

A merge rule turns the K segment models of one iteration into the next model(s). MADlib's rule, the
default, is the image-count-weighted average of ALL weights (trainable and not: BatchNorm moving
statistics are weights too).

The weighted average is streamed inside the database (``gpcnn.kernel.averaging``); the rules here
act on its result between iterations, in the client, and are never shipped into the database
(what ``fedprox`` and ``scaffold`` add to every local step is ``gpcnn.kernel.segment``'s, switched
on by ``MergeRule.in_database``):

- ``average``: MADlib, w <- sum(n_k w_k) / sum(n_k).
- ``bmuf``: block momentum (Chen & Huo 2016). G = avg - w_sent; D <- eta D + zeta G; w <- w + D;
  the next models sent are w (classic) or w + eta D (Nesterov). eta=0, zeta=1 is ``average``.
- ``easgd``: elastic averaging, synchronous (Zhang, Choromanska & LeCun 2015). Each segment keeps its
  own model x_i; centre c: c <- c + alpha sum_i (x_i - c), x_i <- x_i - alpha (x_i - c), both from
  the pre-update values; K alpha < 1. The evaluated model is the centre.
- ``none``: K workers that never merge; each keeps its own model.

Momentum-like rules act on trainable weights only; non-trainable weights (BatchNorm moving mean and
variance) take the plain weighted average, so a variance can never be pushed negative.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np

from gpcnn.kernel.averaging import Vector


@dataclass
class MergeRule:
    """The client-side part of a rule. ``start`` once, then per iteration: ``sent`` gives the
    model each segment starts from, ``update`` takes the iteration's result (the in-database
    average, and each segment's model for rules that keep them), ``model`` is what is evaluated.
    ``start`` and ``update`` may keep the start and the average they are given, not copies: a
    model-sized copy is memory the client would hold for nothing. ``state``/``restore`` carry
    what a resumed run needs beyond the stored models."""

    per_segment: ClassVar[bool] = False  # needs each segment's model back, not only the average
    corrects: ClassVar[bool] = False  # sends each segment a correction, gets a control back
    trainable: Vector  # bool mask over the flat vector
    center: Vector | None = field(default=None, init=False)

    def start(self, weights: Vector, keys: Sequence[int]) -> None:
        self.center = np.asarray(weights, dtype=np.float32)

    def sent(self, keys: Sequence[int]) -> Vector | dict[int, Vector]:
        return self.center

    def update(
        self, average: Vector, segments: Mapping[int, Vector] | None, counts: Mapping[int, int]
    ) -> None:
        self.center = np.asarray(average, dtype=np.float32)

    def model(self) -> Vector:
        return self.center

    def sends_model(self) -> bool:
        """Whether every segment starts from exactly ``model()``: then the next start is the
        checkpoint just stored, and nothing needs sending."""
        return not self.per_segment

    def average_buffer(self) -> Vector | None:
        """Where the next average may be written as it arrives: the model, for a rule whose next
        model is that average and that needs its current one no longer once the iteration's
        start is on its way; else None (the rule updates from its current model)."""
        return None

    def state(self) -> Vector | None:
        return None

    def restore(self, model: Vector, state: Vector | None, segments: Mapping[int, Vector]) -> None:
        self.center = np.array(model, dtype=np.float32)

    def in_database(self) -> dict:
        """What the segments' training loop needs of this rule (``SegmentOptions`` fields)."""
        return {}


class Average(MergeRule):
    """MADlib: the next model is the weighted average."""

    def average_buffer(self) -> Vector | None:
        return self.center


@dataclass
class BlockMomentum(MergeRule):
    eta: float = 0.9
    zeta: float = 1.0
    nesterov: bool = True
    delta: Vector | None = field(default=None, init=False)

    def start(self, weights: Vector, keys: Sequence[int]) -> None:
        super().start(weights, keys)
        self.delta = np.zeros_like(self.center)

    def sent(self, keys: Sequence[int]) -> Vector:
        if not self.nesterov:
            return self.center
        return np.where(self.trainable, self.center + self.eta * self.delta, self.center).astype(
            np.float32
        )

    def sends_model(self) -> bool:
        return not self.nesterov  # Nesterov sends centre + eta * delta

    def update(self, average, segments, counts) -> None:
        step = np.asarray(average, np.float64) - self.sent(())  # G = avg - w_sent
        self.delta = (self.eta * self.delta + self.zeta * step).astype(np.float32)
        self.delta[~self.trainable] = 0
        moved = self.center + self.delta
        self.center = np.where(self.trainable, moved, average).astype(np.float32)

    def state(self) -> Vector:
        return self.delta

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.delta = np.zeros_like(self.center) if state is None else np.array(state, np.float32)


@dataclass
class SegmentModels(MergeRule):
    """Rules where each segment keeps its own model across iterations."""

    per_segment: ClassVar[bool] = True
    locals_: dict[int, Vector] = field(default_factory=dict, init=False)

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        self.locals_ = {k: self.center.copy() for k in keys}

    def sent(self, keys) -> dict[int, Vector]:
        return self.locals_

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.locals_ = {k: np.array(v, np.float32) for k, v in segments.items()}


@dataclass
class ElasticAveraging(SegmentModels):
    alpha: float = 0.45

    def update(self, average, segments, counts) -> None:
        old_center = self.center.astype(np.float64)
        pull = sum(np.asarray(x, np.float64) - old_center for x in segments.values())
        center = old_center + self.alpha * pull
        self.center = np.where(self.trainable, center, average).astype(np.float32)
        self.locals_ = {
            k: np.where(
                self.trainable, np.asarray(x, np.float64) - self.alpha * (x - old_center), x
            ).astype(np.float32)
            for k, x in segments.items()
        }


class NoMerge(SegmentModels):
    """K workers that never merge; the evaluated model is their one-shot average."""

    def update(self, average, segments, counts) -> None:
        self.locals_ = {k: np.array(v, np.float32) for k, v in segments.items()}
        self.center = np.array(average, np.float32)


@dataclass
class FedProx(Average):
    """``average`` with the proximal term mu ||w - w_sent||^2 / 2 in every local loss: the
    segments apply its gradient after every batch (``in_database``); mu = 0 is ``average``."""

    mu: float = 0.01

    def in_database(self) -> dict:
        return {"proximal": self.mu}


def _trainable_step(rule: MergeRule, moved: np.ndarray, average: Vector) -> Vector:
    """The next model: ``moved`` where trainable, the plain average elsewhere (float32)."""
    return np.where(rule.trainable, moved, average).astype(np.float32)


@dataclass
class Scaffold(MergeRule):
    """SCAFFOLD: the server's control variate c and each segment's c_i (zero at the start,
    and zero on non-trainable positions); each segment is sent the model and c - c_i."""

    per_segment: ClassVar[bool] = True
    corrects: ClassVar[bool] = True
    server_lr: float = 1.0
    control: Vector | None = field(default=None, init=False)
    controls: dict[int, Vector] = field(default_factory=dict, init=False)

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        self.control = np.zeros_like(self.center)
        self.controls = {k: np.zeros_like(self.center) for k in sorted(keys)}

    def correction(self, key: int) -> Vector:
        """c - c_i: what segment ``key`` subtracts, times the learning rate, after every batch."""
        return (self.control - self.controls[key]).astype(np.float32)

    def update(self, average, segments, counts, controls: Mapping[int, Vector]) -> None:
        total = sum(counts.values())
        change = sum(
            counts[k] * (np.asarray(c, np.float64) - self.controls[k]) for k, c in controls.items()
        )
        self.control = (self.control + change / total).astype(np.float32)
        self.controls = {k: np.array(controls[k], np.float32) for k in sorted(controls)}
        moved = self.center + self.server_lr * (np.asarray(average, np.float64) - self.center)
        self.center = _trainable_step(self, moved, average)

    def state(self) -> Vector:
        """c, then every segment's c_i in key order: (K + 1) model-sized vectors."""
        return np.concatenate([self.control, *self.controls.values()])

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        parts = np.split(np.asarray(state, np.float32), len(segments) + 1)
        self.control = parts[0].copy()
        self.controls = {k: p.copy() for k, p in zip(sorted(segments), parts[1:], strict=True)}

    def in_database(self) -> dict:
        return {"correction": True}


@dataclass
class FedAdam(MergeRule):
    """Adam on the pseudo-gradient G = avg - w_sent, in the client (Reddi et al. 2021)."""

    server_lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 0.001
    moments: Vector | None = field(default=None, init=False)  # m, then v

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        size = self.center.size
        self.moments = np.concatenate(
            [np.zeros(size, np.float32), np.full(size, self.tau**2, np.float32)]
        )

    def second_moment(self, v: np.ndarray, g2: np.ndarray) -> np.ndarray:
        return self.beta2 * v + (1 - self.beta2) * g2

    def update(self, average, segments, counts) -> None:
        g = np.asarray(average, np.float64) - self.center
        m, v = np.split(self.moments.astype(np.float64), 2)
        m = self.beta1 * m + (1 - self.beta1) * g
        v = self.second_moment(v, g * g)
        m[~self.trainable], v[~self.trainable] = 0, self.tau**2
        self.moments = np.concatenate([m, v]).astype(np.float32)
        moved = self.center + self.server_lr * m / (np.sqrt(v) + self.tau)
        self.center = _trainable_step(self, moved, average)

    def state(self) -> Vector:
        """m, then v: two model-sized vectors."""
        return self.moments

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.moments = np.array(state, np.float32)


class FedYogi(FedAdam):
    """Yogi's second moment: v moves towards G^2 by at most (1 - b2) G^2, additively."""

    def second_moment(self, v, g2):
        return v - (1 - self.beta2) * g2 * np.sign(v - g2)


RULES = {
    "average": Average,
    "bmuf": BlockMomentum,
    "easgd": ElasticAveraging,
    "none": NoMerge,
    "fedprox": FedProx,
    "scaffold": Scaffold,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
}

STATE_LAYOUT = {
    "bmuf": "the block momentum D (one model-sized vector)",
    "scaffold": "c, then each segment's c_i in key order ((K + 1) model-sized vectors)",
    "fedadam": "m, then v (two model-sized vectors)",
    "fedyogi": "m, then v (two model-sized vectors)",
}


def _ranges(k: int) -> dict[str, tuple[str, Callable[[float], bool]]]:
    """Each real option's allowed values for K = k segments: in words, with why, and as a test."""
    return {
        "eta": ("in [0, 1) (eta >= 1 makes the block momentum diverge)", lambda x: 0 <= x < 1),
        "zeta": ("> 0 (zeta <= 0 never steps toward the average)", lambda x: x > 0),
        "alpha": (
            f"> 0 with K*alpha < 1, i.e. in (0, {1 / k:g}) for K={k} segments",
            lambda x: x > 0 and k * x < 1,
        ),
        "mu": (
            ">= 0 (mu = 0 is average; mu < 0 pushes away from the sent model)",
            lambda x: x >= 0,
        ),
        "server_lr": ("> 0 (the server's step on avg - w_sent)", lambda x: x > 0),
        "beta1": ("in [0, 1) (the first moment's decay)", lambda x: 0 <= x < 1),
        "beta2": ("in [0, 1) (the second moment's decay)", lambda x: 0 <= x < 1),
        "tau": ("> 0 (the adaptivity: it keeps sqrt(v) + tau away from 0)", lambda x: x > 0),
    }


def _show(value: object) -> str:
    """A value as the user wrote it: numbers plain (numpy's too), anything else quoted."""
    return str(value) if isinstance(value, numbers.Number) else repr(value)


def _checked(where: str, option: str, value: object, default: object, k: int) -> float | bool:
    """One option as a Python bool or float (numpy scalars come in from arrays), or the error.
    A bool is no number here: eta=True is a mistake, not 1."""
    head = f"{where}: {option}={_show(value)}"
    if isinstance(default, bool):
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{head} is not a bool: {option} must be True or False")
        return bool(value)
    allowed, test = _ranges(k)[option]
    real = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if not real or not math.isfinite(value):
        raise ValueError(f"{head} is not a finite real number: {option} must be {allowed}")
    if not test(float(value)):
        product = f"; here K*alpha = {k} * {value} = {k * value:g}" if option == "alpha" else ""
        raise ValueError(f"{head} is out of range: {option} must be {allowed}{product}")
    return float(value)


def check_options(name: str, options: Mapping | None, segments: int) -> dict:
    """All options of rule ``name`` for K = ``segments``, checked and with the defaults filled in,
    so that a bad value fails before any work. The option names are the rule class's own fields."""
    where = f'merge="{name}"'
    if name not in RULES:
        raise ValueError(f"{where}: choose one of {', '.join(RULES)}")
    defaults = {f.name: f.default for f in fields(RULES[name]) if f.init and f.name != "trainable"}
    if name == "easgd":
        defaults["alpha"] = 0.9 / segments  # K*alpha = 0.9 whatever K
    given = dict(options or {})
    unknown = [option for option in given if option not in defaults]
    if unknown:
        bad = ", ".join(f"{option}={_show(given[option])}" for option in unknown)
        verb = "is not an option" if len(unknown) == 1 else "are not options"
        takes = f"takes {', '.join(defaults)}" if defaults else "takes no options"
        raise ValueError(f"{where}: {bad} {verb}: {name} {takes}")
    return {
        option: _checked(where, option, given.get(option, default), default, segments)
        for option, default in defaults.items()
    }


def make_rule(name: str, trainable: Vector, segments: int, **options) -> MergeRule:
    """A rule by name with its options (bmuf: eta, zeta, nesterov; easgd: alpha, default 0.9/K;
    fedprox: mu; scaffold: server_lr; fedadam, fedyogi: server_lr, beta1, beta2, tau), checked
    by ``check_options``."""
    options = check_options(name, options, segments)
    return RULES[name](trainable=np.asarray(trainable, bool), **options)
