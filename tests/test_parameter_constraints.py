"""The estimator's parameters, declared: every parameter has constraints (or is marked as checked
where it is used), a positive integer is never a bool, and each refusal says what the parameter must
be, before any work (no database needed: the check runs before the first connection)."""

from __future__ import annotations

import numpy as np
import pytest

from gpcnn import GreenplumCNN
from gpcnn.estimator.constraints import Booleans, Integers, Lists, Options
from gpcnn.estimator.parameters import PARAMETER_CONSTRAINTS


def refusal(**params) -> str:
    with pytest.raises(ValueError) as refused:
        GreenplumCNN(None, **params)._check_params()
    return str(refused.value)


def test_every_parameter_is_declared():
    assert set(PARAMETER_CONSTRAINTS) == set(GreenplumCNN(None).get_params(deep=False))
    assert GreenplumCNN._parameter_constraints is PARAMETER_CONSTRAINTS


@pytest.mark.parametrize("name", ["batch_size", "iterations", "local_epochs"])
@pytest.mark.parametrize("value", [True, False, 0, -1, 2.0, "8", None])
def test_a_count_is_a_positive_integer_and_never_a_bool(name, value):
    assert refusal(**{name: value}) == f"{name} must be a positive integer, got {value!r}"


def test_numpy_integers_are_integers_and_numpy_bools_are_bools():
    assert Integers().holds(np.int64(3)) and not Integers().holds(np.bool_(True))
    assert Booleans().holds(np.bool_(False)) and not Booleans().holds(1)
    GreenplumCNN(None, batch_size=np.int32(16), shuffle=np.bool_(True))._check_params()


def test_a_schedule_or_frequency_may_be_a_list_and_says_so():
    assert refusal(merges_per_epoch=[]).startswith(
        "merges_per_epoch must be a positive integer or a non-empty list of them"
    )
    assert refusal(merges_per_epoch=[4, True]).endswith("got [4, True]")
    assert refusal(validation_freq=0) == (
        "validation_freq must be a positive integer or a list of iterations, got 0"
    )
    GreenplumCNN(None, merges_per_epoch=(8, 8, 1), validation_freq=[1, 5])._check_params()


def test_choices_name_what_to_choose_and_follow_the_rule_registry():
    assert refusal(verbose=True) == "verbose must be 0, 1 or 2 (as in Keras), got True"
    message = refusal(merge="mean")
    assert message.startswith("merge must be one of average, bmuf,") and "fednova" in message
    assert refusal(shuffle=1) == "shuffle must be True or False, got 1"
    assert "optimizer_state must be one of" in refusal(optimizer_state="shared")


def test_what_holds_between_parameters_is_checked_after_each_alone():
    assert refusal(local_epochs=2, merges_per_epoch=4) == (
        "local_epochs > 1 needs merges_per_epoch=1 (one merge per pass)"
    )


def test_a_list_constraint_refuses_a_string():
    assert not Lists(Options(("a",)), "a list of a").holds("a")
