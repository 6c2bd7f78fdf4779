"""A segment far from the others is named while the fit runs: its loss or step against the other
segments' median and spread (leave-one-out), once per segment and measure, never with two
segments, not for what IID segments differ by, and not on a table whose skew the fit warned of."""

from __future__ import annotations

import logging

from gpcnn.fit.forecast.early_warning import EarlyBasis
from gpcnn.fit.outliers import outliers
from gpcnn.fit.progress import SegmentCheck, default_callbacks


def segments(losses, steps=None):
    steps = steps or [1.0] * len(losses)
    pairs = zip(losses, steps, strict=True)
    return [{"key": k, "loss": x, "step": s} for k, (x, s) in enumerate(pairs)]


def test_a_segment_with_shuffled_labels_is_named_by_its_loss():
    (found,) = outliers(segments([0.41, 0.38, 2.31, 0.45]))
    assert (found.key, found.measure, found.value) == (2, "training loss", 2.31)
    assert "segment 2's training loss 2.31 is far from the other segments' (median 0.41" in (
        found.message(4)
    )


def test_a_segment_that_took_a_much_longer_step_is_named_by_its_step():
    (found,) = outliers(segments([0.4, 0.4, 0.4, 0.4, 0.4], [1.0, 1.1, 0.9, 1.0, 30.0]))
    assert (found.key, found.measure) == (4, "step")


def test_segments_that_differ_as_the_studys_iid_segments_did_are_not_named():
    # a step 20 spreads from the others': more than the study's IID runs reached (13.5), below FAR
    assert outliers(segments([1.0, 1.0, 1.1, 0.9, 1.0, 1.0, 1.0, 1.0], [1.0] * 7 + [2.0])) == []
    assert outliers(segments([0.3, 9.0])) == []  # two segments: neither is the odd one


def test_a_fit_on_a_table_whose_skew_it_warned_of_does_not_check_its_segments():
    basis = EarlyBasis(None, calibrated=True, final_epoch=4, segments=4)
    callbacks = default_callbacks(1, 0, 1, 4, [], check_segments=False, early=basis)
    names = [type(c).__name__ for c in callbacks]
    assert "SegmentCheck" not in names and "EarlyWarning" in names


def test_the_fit_warns_once_per_segment_and_measure(caplog):
    history = []
    check = SegmentCheck(history)
    with caplog.at_level(logging.WARNING, "gpcnn"):
        for iteration in (1, 2):
            history.append({"iteration": iteration, "per_segment": segments([0.4, 0.4, 5.0])})
            check.on_epoch_end(iteration - 1, {})
    assert [r.getMessage()[:45] for r in caplog.records] == [
        "iteration 1: segment 2's training loss 5 is f"
    ]
