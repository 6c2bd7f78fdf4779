"""Merge rules as plug-ins: rules defined here alone, registered through the public
registry, combining the kernel's local-step hooks with a client-side update of their own, trained
in the database in both dispatch modes and checked against an in-process reference that takes the
same float32 steps; the registry is left as it was found.

One small table on 2 segments (150 8x8 images, 4 buffers per segment), the tiny CNN, one TF
thread per segment, SGD with momentum, fixed seeds, 2 iterations per fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import learnable_images, tiny_cnn

from gpcnn.data.tables import TableName, describe, load_images
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit.rules import (
    RULES,
    MergeRule,
    Range,
    check_options,
    register_rule,
    unregister_rule,
)
from gpcnn.kernel import averaging, keras_setup, keras_state, local_steps, segment, wire
from gpcnn.kernel.layout import OPTIMIZER, WEIGHTS, model_layout

keras = keras_setup.keras_module()

LEARNING_RATE = 0.05
BATCH = 16
SEED = 5
TRAIN = "gpcnn_plugins_test.train"
FIT_PARAMS = {
    "batch_size": BATCH,
    "iterations": 2,
    "seed": SEED,
    "threads_per_segment": 1,
    "verbose": 0,
}


@dataclass
class Damped(MergeRule):
    """A plug-in: FedProx's proximal term in every local step (the kernel's ``proximal`` hook),
    and a client that moves only a fraction ``beta`` of the way to the average per merge."""

    mu: float = 0.5
    beta: float = 0.5

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {
            "mu": Range(">= 0", lambda x: x >= 0),
            "beta": Range(
                "in (0, 1] (the fraction of the way to the average)", lambda x: 0 < x <= 1
            ),
        }

    def update(self, average, segments, counts, **extras) -> None:
        moved = self.center + self.beta * (np.asarray(average, np.float64) - self.center)
        self.center = np.where(self.trainable, moved, average).astype(np.float32)

    def in_database(self) -> dict:
        return {"proximal": self.mu}


@dataclass
class CorrectedProx(MergeRule):
    """A plug-in combining both hooks, in this order: the proximal term, then a correction
    c - c_i (the ``correction`` hook, which sends it and gives each segment's new c_i back);
    the client's c is the plain mean of the c_i, its model the average."""

    per_segment: ClassVar[bool] = True
    mu: float = 0.5
    control: np.ndarray | None = field(default=None, init=False)
    controls: dict[int, np.ndarray] = field(default_factory=dict, init=False)

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        self.control = np.zeros_like(self.center)
        self.controls = {k: np.zeros_like(self.center) for k in keys}

    def start_extras(self, key: int) -> dict[str, np.ndarray]:
        return {"correction": (self.control - self.controls[key]).astype(np.float32)}

    def update(self, average, segments, counts, *, controls) -> None:
        self.controls = {k: np.array(c, np.float32) for k, c in controls.items()}
        self.control = np.mean(list(self.controls.values()), axis=0).astype(np.float32)
        self.center = np.array(average, np.float32)

    def in_database(self) -> dict:
        return {"proximal": self.mu, "correction": True}


PLUGINS = {"damped": Damped, "corrected_prox": CorrectedProx}


@pytest.fixture(scope="module")
def registered():
    """The plug-ins registered for this module only; the registry as found afterwards."""
    before = list(RULES.items())
    for name, rule in PLUGINS.items():
        register_rule(name)(rule)
    yield
    for name in PLUGINS:
        unregister_rule(name)
    assert list(RULES.items()) == before


@pytest.fixture(scope="module")
def table(db, schema):
    """The table, loaded once per dispatch mode (every test here runs in both, see conftest)."""
    images, labels = learnable_images(150)
    dealt = {"segments": 2, "buffer_size": 20, "replace": True, "progress": False}
    load_images(db, TRAIN, images, labels, **dealt)
    return describe(db, TRAIN)


def fitted(db, model, merge: str, **options) -> np.ndarray:
    """The flat model of a 2-iteration fit with the plug-in ``merge``."""
    sgd = keras.optimizers.SGD(LEARNING_RATE, momentum=0.9)
    est = GreenplumCNN(model, optimizer=sgd, learning_rate=None, **FIT_PARAMS, database=db)
    est.set_params(merge=merge, merge_options=options)
    with est:
        est.fit(TRAIN)
    return wire.flatten(est.model_.get_weights())


def stored_buffers(db, info) -> dict[int, list]:
    """Each key's (images, labels) buffers in buffer order, as stored."""
    name = TableName.parse(str(info.table))
    query = f"SELECT __dist_key__, x, y, n FROM {name.schema}.{name.name} ORDER BY 1, buffer_id"
    with db.connect() as conn:
        rows = conn.execute(sa.text(query)).all()
    out: dict[int, list] = {k: [] for k in info.keys}
    for key, x, y, n in rows:
        out[key].append((segment.decode_images(x, n, info.image_shape), segment.decode_labels(y)))
    return out


def reference(model, info, buffers, rule: MergeRule, iterations: int) -> np.ndarray:
    """The rule trained in process, on flat vectors: each key trains a copy from its start with a
    fresh SGD+momentum and, after every batch, on the trainable positions, takes the float32
    steps its hooks take in the database (proximal: w <- w - (lr mu)(w - w_sent); correction:
    w <- w - lr d, giving back (w_sent - w) / sum(lr) - d); then the rule's own update."""
    local = keras.models.model_from_json(model.to_json())
    sgd = keras.optimizers.SGD(LEARNING_RATE, momentum=0.9)
    local.compile(optimizer=sgd, loss="sparse_categorical_crossentropy")
    local.optimizer.build(local.trainable_variables)
    fresh = wire.optimizer_vector(local)
    mask = wire.trainable_mask(wire.manifest(local))
    keys = list(info.keys)
    counts = {k: sum(len(labels) for _, labels in buffers[k]) for k in keys}
    rule.start(wire.flatten(model.get_weights()), keys)
    mu = np.float32(rule.in_database()["proximal"])
    for iteration in range(1, iterations + 1):
        trained, given_back = {}, {}
        sent = rule.sent(keys)
        for key in keys:
            start = sent[key] if isinstance(sent, dict) else sent
            d = rule.start_extras(key).get("correction")
            wire.set_model_weights(local, start)
            wire.set_optimizer_vector(local, fresh)
            keras_state.seed_everything(local, SEED, iteration, key)
            rates = 0.0
            batches = [
                (segment.to_model_input(x)[i : i + BATCH], y[i : i + BATCH])
                for x, y in buffers[key]
                for i in range(0, len(y), BATCH)
            ]
            for x, y in batches:
                rate = np.float32(keras.ops.convert_to_numpy(local.optimizer.learning_rate))
                local.train_on_batch(x, y)
                w = wire.flatten(local.get_weights())
                stepped = w - (rate * mu) * (w - start)
                if d is not None:
                    stepped = stepped - rate * d
                wire.set_model_weights(local, np.where(mask, stepped, w))
                rates += float(rate)
            trained[key] = wire.flatten(local.get_weights())
            if d is not None:
                control = (start - trained[key]) / np.float32(rates) - d
                given_back[key] = np.where(mask, control, 0).astype(np.float32)
        average = averaging.weighted_average([trained[k] for k in keys], [counts[k] for k in keys])
        rule.update(average, trained, counts, **({"controls": given_back} if given_back else {}))
    return rule.model()


def test_a_plugin_rule_with_the_proximal_hook_trains_in_the_database_as_in_process(
    registered, db, table
):
    engine, model = db, tiny_cnn()
    got = fitted(engine, model, "damped", mu=0.5, beta=0.5)
    trainable = wire.trainable_mask(wire.manifest(model))
    want = reference(model, table, stored_buffers(engine, table), Damped(trainable, 0.5, 0.5), 2)
    np.testing.assert_array_equal(got, want)
    assert np.abs(got - fitted(engine, model, "fedprox", mu=0.5)).max() > 1e-4  # its own update


def test_a_plugin_rule_combining_both_hooks_trains_in_the_database_as_in_process(
    registered, db, table
):
    engine, model = db, tiny_cnn()
    got = fitted(engine, model, "corrected_prox", mu=0.5)
    trainable = wire.trainable_mask(wire.manifest(model))
    rule = CorrectedProx(trainable, 0.5)
    want = reference(model, table, stored_buffers(engine, table), rule, 2)
    np.testing.assert_array_equal(got, want)
    assert np.abs(rule.control).max() > 0  # the segments gave their controls back


def test_a_plugin_rule_declares_its_options_and_their_ranges(registered):
    assert check_options("damped", None, 2) == {
        "mu": 0.5,
        "beta": 0.5,
        "batchnorm_statistics": "averaged",
    }
    with pytest.raises(ValueError, match=r"beta=2 is out of range: beta must be in \(0, 1\]"):
        check_options("damped", {"beta": 2}, 2)
    with pytest.raises(ValueError, match=r"choose one of average, .*, damped, corrected_prox$"):
        check_options("mean", None, 2)
    with pytest.raises(ValueError, match="registered already"):
        register_rule("damped")(Damped)


def test_the_layout_cuts_a_vector_into_the_parts_it_was_joined_from():
    """Weights, the optimizer state whose size only the model knows, then the hooks' extras."""
    layout = model_layout(3, local_steps.sends(["proximal", "correction"]))
    assert layout.names() == [WEIGHTS, OPTIMIZER, "correction"]
    parts = {WEIGHTS: np.arange(3), OPTIMIZER: np.arange(5) + 10, "correction": np.arange(3) + 20}
    vector = layout.join(parts)
    assert vector.dtype == np.float32 and vector.size == 11
    for name, part in layout.split(vector).items():
        np.testing.assert_array_equal(part, parts[name])
    assert layout.sizes(6) == {WEIGHTS: 3, OPTIMIZER: 0, "correction": 3}  # no optimizer sent
    assert local_steps.returns(["proximal", "correction"]) == ["controls"]
    with pytest.raises(ValueError, match="no local step"):
        local_steps.sends(["momentum"])
