"""The options that cross into the database: one JSON encoding, defaults in one place, and the
shape that earlier versions stored in a saved estimator's sidecar still read."""

from __future__ import annotations

import json

import pytest

from gpcnn.kernel.protocol import CompileOptions, IterationOptions, SegmentOptions, Transport

COMPILE = CompileOptions({"class_name": "SGD", "config": {"learning_rate": 0.1}}, "mse", ("mae",))


def test_segment_options_survive_their_json_unchanged():
    options = SegmentOptions(COMPILE, (8, 8, 1), 4, True, 7, 2, "local")
    sent = options.for_iteration(iteration=3, optimizer_sent=True, learning_rate=0.05)
    sent = sent.with_transport(11, 99)
    assert SegmentOptions.from_json(sent.to_json()) == sent
    assert SegmentOptions.from_json(options.to_json()) == options


def test_the_encoding_is_one_flat_object():
    sent = SegmentOptions(COMPILE, (2, 2, 1)).for_iteration(iteration=5).with_transport(1, 10)
    assert json.loads(sent.to_json()) == {
        "compile": {"optimizer": COMPILE.optimizer, "loss": "mse", "metrics": ["mae"]},
        "image_shape": [2, 2, 1],
        "batch_size": 32,
        "shuffle": False,
        "seed": None,
        "threads": None,
        "optimizer_state": "reset",
        "iteration": 5,
        "optimizer_sent": False,
        "learning_rate": None,
        "optimizer_step": None,
        "transfer": 1,
        "vector_size": 10,
    }


def test_a_sidecar_of_the_previous_version_reads_with_the_defaults_for_what_it_lacks():
    stored = {
        "compile": {"optimizer": COMPILE.optimizer, "loss": "mse", "metrics": ["mae"]},
        "batch_size": 16,
        "shuffle": False,
        "image_shape": [28, 28, 1],
        "seed": 0,
        "threads": 1,
        "optimizer_state": "average",
    }
    options = SegmentOptions.from_dict(stored)
    assert options == SegmentOptions(COMPILE, (28, 28, 1), 16, False, 0, 1, "average")
    assert options.iteration == IterationOptions() and options.transport is None


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        SegmentOptions(COMPILE, (1, 1, 1)).batch_size = 2  # type: ignore[misc]
    assert Transport(1, 2) == Transport(1, 2)


def test_a_rules_local_steps_cross_in_order_and_a_step_that_changes_nothing_stays_out():
    options = SegmentOptions(COMPILE, (2, 2, 1))
    sent = options.with_local_steps({"proximal": 0.5, "correction": True})
    assert sent.local_steps == (("proximal", 0.5), ("correction", True))
    assert json.loads(sent.to_json())["local_steps"] == {"proximal": 0.5, "correction": True}
    assert SegmentOptions.from_json(sent.to_json()) == sent
    plain = options.with_local_steps({"proximal": 0.0})
    assert plain == options and "local_steps" not in plain.to_dict()
