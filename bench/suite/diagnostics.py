"""Benchmark ``diagnostics``: what an iteration's diagnostics cost, as a share of its fixed cost.

On the average's path the diagnostics add two passes over the weights to an iteration:
each segment's step ``||w_k - w_start||^2`` at the end of its transition (the K segments at once)
and the merged step ``||w̄ - w_start||^2`` in the client as the average streams in; the spread
follows from these numbers. Both passes are ``averaging.squared_distance`` over the model's float32
vector. Each round runs ``dense``'s steady iteration at K = 2 (its fixed cost: the iteration's
seconds minus the same batches trained in-process) and right after it times one pass of each kind
on vectors of that model's size, so that the share is a ratio taken in one machine state. It is an
upper bound: the client's pass overlaps the wait for the segments' chunks. The floor beside it:
the same two passes as numpy's float32 dot product of the two vectors (each read once, no float64
conversion), the least any measure of a step over all the weights can cost.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from .base import Benchmark, Context, Outcome, Table, Target

K = 2
LIMIT = 0.02  # of the fixed cost, at every size


def passes_seconds(values: int) -> tuple[float, float]:
    """Seconds of the two passes (a segment's, then the client's) over ``values`` weights, and
    of their floor: the same two reads as float32 dot products."""
    from gpcnn.kernel import averaging

    rng = np.random.default_rng(values)
    start = rng.normal(0, 0.05, values).astype(np.float32)
    trained = start + rng.normal(0, 1e-3, values).astype(np.float32)
    began = time.perf_counter()
    averaging.squared_distance(trained, start)  # a segment's step
    averaging.squared_distance(trained, start)  # the client's merged step
    passes = time.perf_counter() - began
    began = time.perf_counter()
    for _ in range(2):
        np.einsum("i,i->", trained, start)  # einsum: one thread, as squared_distance
    return passes, time.perf_counter() - began


def run(context: Context) -> Outcome:
    import gpcnn

    from . import dense  # it loads TensorFlow

    db = gpcnn.connect(context.database)
    gpcnn.install(db)
    table = dense.table_for(db, K)
    measured: dict[float, dict[str, list[float]]] = {}
    for round_ in range(1, context["rounds"] + 1):
        for million in context["sizes"]:
            fixed = dense.one_fit(db, table, float(million), K)["fixed"]
            passes, floor = passes_seconds(dense.model_bytes(float(million)) // 4)
            got = measured.setdefault(
                float(million), {"fixed": [], "passes": [], "floor": [], "share": []}
            )
            got["fixed"].append(fixed)
            got["passes"].append(passes)
            got["floor"].append(floor)
            got["share"].append(passes / fixed)
            print(
                f"round {round_} {million}M: fixed {fixed:.3f} s, diagnostics {passes:.4f} s "
                f"({100 * passes / fixed:.1f} %), floor {floor:.4f} s",
                flush=True,
            )
    db.close()
    return outcome(measured)


def outcome(measured: dict[float, dict[str, list[float]]]) -> Outcome:
    """The table and targets of each size's rounds."""
    rows, targets = [], []
    for million, got in sorted(measured.items()):
        share = statistics.median(got["share"])
        floor = statistics.median(f / t for f, t in zip(got["floor"], got["fixed"], strict=True))
        over = statistics.median(p / f for p, f in zip(got["passes"], got["floor"], strict=True))
        rows.append(
            [
                f"{million:g}M",
                len(got["share"]),
                round(statistics.median(got["fixed"]), 4),
                round(statistics.median(got["passes"]), 4),
                f"{100 * share:.1f} %",
                f"{100 * min(got['share']):.1f}–{100 * max(got['share']):.1f} %",
                f"{100 * floor:.1f} %",
                f"{over:.1f}×",
            ]
        )
        targets.append(
            Target(
                f"diagnostics ≤ {100 * LIMIT:g} % of the fixed cost at {million:g}M, K = {K}",
                f"{100 * share:.1f} %",
                share <= LIMIT,
            )
        )
    table = Table(
        "Medians over the rounds; the share is the median of each round's ratio; the floor is "
        "the same two reads as float32 dot products, its share of the fixed cost and the "
        "passes' time over it (medians of each round's ratio).",
        [
            "weights",
            "rounds",
            "fixed s",
            "diagnostics s",
            "share",
            "share (min–max)",
            "floor's share",
            "× floor",
        ],
        rows,
    )
    return Outcome([table], targets, {"measured": {str(m): g for m, g in measured.items()}})


BENCHMARK = Benchmark(
    name="diagnostics",
    title="The diagnostics' cost in an iteration",
    question=(
        "How much of an iteration's fixed cost do the diagnostics (each segment's step, the "
        "merged step, the spread) take, at 1M and 25M weights?"
    ),
    method=(
        "Each round: `fixed_cost`'s steady iteration of a dense model at K = 2, then the "
        "diagnostics' two passes over a vector of the model's size (a segment's step and the "
        "client's merged step, `averaging.squared_distance`), timed right after it; the share "
        "is their seconds over the iteration's fixed cost (an upper bound: the client's pass "
        "overlaps its wait for the segments). The floor: the same two reads of both vectors as "
        "numpy float32 dot products (no float64 conversion), the least a measure of a step "
        "over all the weights costs."
    ),
    defaults={"sizes": [1, 25], "rounds": 5},
    quick={"sizes": [1], "rounds": 1},
    run=run,
)
