"""The local-step hooks: what a merge rule adds to every local step inside the database.

A hook acts after every ``train_on_batch``, on the trainable weights only, in float32 NumPy
(tests/test_rules_db.py's references do the same operations), with ``lr`` the optimizer's learning
rate of that batch, read before it:

- ``proximal`` (FedProx, parameter mu): w <- w - (lr * mu) * (w - w_sent).
- ``correction`` (SCAFFOLD, parameter True): w <- w - lr * d, with d = c - c_i sent after the
  start's weights (and optimizer state) as the extra ``correction``; at the end the segment gives
  back c_i+ = (w_sent - w) / sum(lr) - d after its trained vector (zero where not trainable) as
  the extra ``controls``: the average of the steps' directions, i.e. state derived from its
  gradients.

The client selects hooks by name with their parameters (``SegmentOptions.local_steps``; a hook
whose parameter is 0 or False is off); they act in that order. Only the hooks registered here
(``register_local_step``) run in the database: it is what ``gpcnn install`` ships.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from . import wire
from .keras_setup import keras_module
from .layout import WEIGHTS, model_layout


class LocalStep:
    """One hook: the model-sized extras it reads from the start (``sends``) and gives back after
    the trained vector (``returns``), its step after every batch and what it gives back."""

    sends: ClassVar[tuple[str, ...]] = ()
    returns: ClassVar[tuple[str, ...]] = ()

    def __init__(self, parameter: Any) -> None:
        self.parameter = parameter

    def after_batch(
        self, w: np.ndarray, sent: np.ndarray, extras: dict[str, np.ndarray], rate: np.float32
    ) -> np.ndarray:
        """One trainable weight ``w`` after a batch at learning rate ``rate``; ``sent`` is its
        start value, ``extras`` its slices of the start's extras."""
        return w

    def returned(
        self, w: np.ndarray, sent: np.ndarray, extras: dict[str, np.ndarray], rate_sum: float
    ) -> dict[str, np.ndarray]:
        """This weight's pieces of the extras ``returns``, at the end of the local training."""
        return {}


LOCAL_STEPS: dict[str, type[LocalStep]] = {}


def register_local_step(name: str) -> Callable[[type[LocalStep]], type[LocalStep]]:
    """Register a hook under ``name``, the key of ``SegmentOptions.local_steps``."""

    def register(cls: type[LocalStep]) -> type[LocalStep]:
        LOCAL_STEPS[name] = cls
        return cls

    return register


@register_local_step("proximal")
class Proximal(LocalStep):
    """FedProx's proximal term mu ||w - w_sent||^2 / 2: its gradient step after every batch."""

    def after_batch(self, w, sent, extras, rate):
        return w - (rate * np.float32(self.parameter)) * (w - sent)


@register_local_step("correction")
class Correction(LocalStep):
    """SCAFFOLD's correction d = c - c_i after every batch, and the new control c_i+."""

    sends = ("correction",)
    returns = ("controls",)

    def after_batch(self, w, sent, extras, rate):
        return w - rate * extras["correction"]

    def returned(self, w, sent, extras, rate_sum):
        return {"controls": (sent - w) / np.float32(rate_sum) - extras["correction"]}


def _hooks(names: Iterable[str]) -> list[type[LocalStep]]:
    unknown = [name for name in names if name not in LOCAL_STEPS]
    if unknown:
        raise ValueError(f"no local step {unknown}: choose from {', '.join(LOCAL_STEPS)}")
    return [LOCAL_STEPS[name] for name in names]


def sends(names: Iterable[str]) -> list[str]:
    """The start's extras that the hooks ``names`` read, in order (``layout.model_layout``)."""
    return [extra for hook in _hooks(names) for extra in hook.sends]


def returns(names: Iterable[str]) -> list[str]:
    """The trained vector's extras that the hooks ``names`` give back, in order."""
    return [extra for hook in _hooks(names) for extra in hook.returns]


class LocalSteps:
    """The hooks of one segment's training, from its first buffer to its last: each trainable
    variable with its sent value and its slices of the start's extras, and the sum of the
    learning rates of its batches."""

    def __init__(self, model: Any, start: np.ndarray, steps: Mapping[str, Any]) -> None:
        self.model = model
        self.hooks = [hook(steps[name]) for name, hook in zip(steps, _hooks(steps), strict=True)]
        count = sum(wire.sizes(wire.manifest(model)))
        extras = sends(steps)
        parts = model_layout(count, extras).split(start)
        trainable = {id(v) for v in model.trainable_weights}
        self.parts, offset = [], 0
        for var in model.weights:
            size = int(np.prod(var.shape, dtype=np.int64))
            if id(var) in trainable:
                piece = slice(offset, offset + size)
                sent = parts[WEIGHTS][piece].reshape(var.shape).copy()
                mine = {name: parts[name][piece].reshape(var.shape).copy() for name in extras}
                self.parts.append((var, sent, mine))
            offset += size
        self.rate_sum = 0.0

    def train_on_batch(self, x, y, return_dict: bool = True):
        """``train_on_batch`` followed by every hook's step on every trainable weight."""
        model = self.model
        rate = np.float32(keras_module().ops.convert_to_numpy(model.optimizer.learning_rate))
        logs = model.train_on_batch(x, y, return_dict=return_dict)
        for var, sent, extras in self.parts:
            w = np.asarray(var.numpy(), np.float32)
            for hook in self.hooks:
                w = hook.after_batch(w, sent, extras, rate)
            var.assign(w)
        self.rate_sum += float(rate)
        return logs

    def returned(self) -> dict[str, np.ndarray]:
        """Each extra the hooks give back, model-sized (zero where not trainable)."""
        pieces: dict[str, list] = {name: [] for hook in self.hooks for name in hook.returns}
        mine = {id(var): (sent, extras) for var, sent, extras in self.parts}
        for var in self.model.weights:
            if id(var) not in mine:
                zeros = np.zeros(int(np.prod(var.shape, dtype=np.int64)), np.float32)
                for piece in pieces.values():
                    piece.append(zeros)
                continue
            sent, extras = mine[id(var)]
            w = np.asarray(var.numpy(), np.float32)
            for hook in self.hooks:
                for name, value in hook.returned(w, sent, extras, self.rate_sum).items():
                    pieces[name].append(value.ravel())
        return {name: wire.flatten(piece) for name, piece in pieces.items()}
