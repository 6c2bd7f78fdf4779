"""What crosses into the database with every statement: the segment options, as frozen dataclasses
with their defaults here and one JSON encoding.

The client builds ``SegmentOptions`` once per fit (how to compile and train the model), adds an
``IterationOptions`` per iteration (which iteration, the learning rate, whether an optimizer state
is sent) and the engine a ``Transport`` per statement (which transfer holds the start vector, its
size) and the table's keys in shard order (``shard_keys``: a segment's random streams derive from
its shard's position there, never from the key); the segment decodes them with
``SegmentOptions.from_json``. The encoding is one flat JSON object, the shape that gpcnn 0.2
stored in an estimator's ``.gpcnn.json`` sidecar.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPTIMIZER_STATES = ("reset", "local", "average")


@dataclass(frozen=True)
class CompileOptions:
    """``model.compile``'s arguments: the optimizer as Keras serializes it, loss, metrics."""

    optimizer: dict
    loss: str = "sparse_categorical_crossentropy"
    metrics: tuple[str, ...] = ("accuracy",)

    def to_dict(self) -> dict:
        return {"optimizer": self.optimizer, "loss": self.loss, "metrics": list(self.metrics)}

    @classmethod
    def from_dict(cls, values: dict) -> CompileOptions:
        return cls(values["optimizer"], values["loss"], tuple(values["metrics"]))


@dataclass(frozen=True)
class IterationOptions:
    """One iteration's: its number (seeds and shuffles derive from it), whether the start vector
    carries an optimizer state after the weights, and the learning rate the client's callbacks
    set, or the step of its learning-rate schedule (batches trained so far)."""

    iteration: int = 0
    optimizer_sent: bool = False
    learning_rate: float | None = None
    optimizer_step: int | None = None


@dataclass(frozen=True)
class Transport:
    """Where one statement's vectors are: the token naming them in the segment processes (the
    transfer's id) and the values in each."""

    transfer: int
    vector_size: int


@dataclass(frozen=True)
class SegmentOptions:
    """How a segment compiles and trains the model: the same for every iteration of a fit.
    ``local_steps`` (hook name, its parameter) are what the merge rule adds to every local step,
    in order (``local_steps.LOCAL_STEPS``: FedProx's ``proximal`` with its mu, SCAFFOLD's
    ``correction``, whose start vector ends with c - c_i and trained one with c_i+)."""

    compile: CompileOptions
    image_shape: tuple[int, ...]
    batch_size: int = 32
    shuffle: bool = False
    seed: int | None = None
    threads: int | None = None
    optimizer_state: str = "reset"
    local_steps: tuple[tuple[str, Any], ...] = ()
    iteration: IterationOptions = IterationOptions()
    transport: Transport | None = None
    # The table's ``__dist_key__`` values in shard order (its catalog's ``dist_keys``): the
    # engine chooses the keys (Greenplum by the primary each lands on), so Dropout masks and
    # buffer orders derive from the shard's position here, and a seed gives the same model on
    # every engine.
    shard_keys: tuple[int, ...] = ()

    def replace(self, **changes: Any) -> SegmentOptions:
        return dataclasses.replace(self, **changes)

    def with_local_steps(self, steps: Mapping[str, Any]) -> SegmentOptions:
        """These options with a rule's local-step hooks (name: parameter, in order); a hook
        whose parameter is 0 or False is left out: it would change nothing."""
        return self.replace(local_steps=tuple((k, v) for k, v in steps.items() if v))

    def for_iteration(self, **values: Any) -> SegmentOptions:
        """These options with an iteration's (``IterationOptions``' fields)."""
        return self.replace(iteration=IterationOptions(**values))

    def with_transport(self, transfer: int, vector_size: int) -> SegmentOptions:
        return self.replace(transport=Transport(int(transfer), int(vector_size)))

    def shard(self, key: int) -> int:
        """The position (0..K-1) of key ``key``'s shard in the table: what seeds derive from."""
        try:
            return self.shard_keys.index(int(key))
        except ValueError:
            raise ValueError(
                f"key {key} is not among the table's keys {list(self.shard_keys)} that the "
                "statement sent (``Backend.run_training`` sends the catalog's dist_keys): if the "
                "table was reloaded during the fit, fit it again"
            ) from None

    def to_dict(self) -> dict:
        values = {
            "compile": self.compile.to_dict(),
            "image_shape": list(self.image_shape),
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "threads": self.threads,
            "optimizer_state": self.optimizer_state,
            **dataclasses.asdict(self.iteration),
        }
        if self.local_steps:  # a rule's additions, only where it makes them
            values["local_steps"] = dict(self.local_steps)
        if self.transport is not None:
            values.update(dataclasses.asdict(self.transport))
        if self.shard_keys:  # per statement, as the transport (not in an estimator's sidecar)
            values["shard_keys"] = list(self.shard_keys)
        return values

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, values: dict) -> SegmentOptions:
        """The options of ``to_dict``'s shape; a field that is absent takes its default."""
        own = {f.name for f in dataclasses.fields(cls)} - {
            "compile",
            "image_shape",
            "iteration",
            "transport",
            "shard_keys",
            "local_steps",
        }
        steps = {f.name for f in dataclasses.fields(IterationOptions)}
        transport = None
        if "transfer" in values:
            transport = Transport(int(values["transfer"]), int(values["vector_size"]))
        return cls(
            **{k: v for k, v in values.items() if k in own},
            compile=CompileOptions.from_dict(values["compile"]),
            image_shape=tuple(values.get("image_shape", ())),
            iteration=IterationOptions(**{k: v for k, v in values.items() if k in steps}),
            transport=transport,
            shard_keys=tuple(int(k) for k in values.get("shard_keys", ())),
            local_steps=tuple(values.get("local_steps", {}).items()),
        )

    @classmethod
    def from_json(cls, text: str) -> SegmentOptions:
        return cls.from_dict(json.loads(text))
