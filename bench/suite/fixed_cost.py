"""Benchmark ``fixed_cost``: the fixed cost of a steady iteration against the floor of the
primitives its data path is made of (``dense`` times the one, ``primitives`` the other)."""

from __future__ import annotations

from . import dense, primitives
from .base import Benchmark, Context, Outcome, Table, Target

# seconds of fixed cost at K = 2 by million weights (1M, 25M and 100M)
LIMITS = {1.0: 0.1, 25.0: 0.6, 100.0: 3.0}


def run(context: Context) -> Outcome:
    configs = [(float(m), int(k)) for m in context["sizes"] for k in context["segments"]]
    rows = dense.rounds(configs, context["rounds"], urls=(context.database,))
    floors = {}
    if context["floor"]:
        for million in sorted({m for m, _ in configs}):
            floors[million] = primitives.measure(million, context["floor_rounds"], context.database)
    return outcome(rows, floors)


def outcome(rows: list[dict], floors: dict[float, dict]) -> Outcome:
    """The tables and targets of measured rows and floors (by million weights, at K = 2)."""
    table = []
    targets = []
    for row in rows:
        m, k, medians = row["million"], row["segments"], row["medians"]
        floor = floors.get(m, {}).get("floor_seconds") if k == primitives.K else None
        fixed = row["fixed_rounds"]
        table.append(
            [
                f"{m:g}M ({row['model_bytes'] / 1e6:.1f} MB)",
                k,
                len(fixed),
                medians["seconds"],
                medians["local_train"],
                medians["fixed"],
                f"{min(fixed):.3f}–{max(fixed):.3f}",
                round(row["mb_per_s"]),
                "–" if floor is None else floor,
                "–" if floor is None else f"{medians['fixed'] / floor:.2f}",
            ]
        )
        if k == 2 and m in LIMITS:
            targets.append(
                Target(
                    f"fixed cost ≤ {LIMITS[m]:g} s at {m:g}M, K = 2",
                    f"{medians['fixed']:.3f} s"
                    + ("" if floor is None else f" ({medians['fixed'] / floor:.2f}× the floor)"),
                    medians["fixed"] <= LIMITS[m],
                )
            )
    tables = [
        Table(
            "Medians over the rounds, seconds; the floor is the primitives' CPU over the CPUs "
            "(below).",
            [
                "weights",
                "K",
                "rounds",
                "iteration s",
                "in-process train s",
                "fixed s",
                "fixed s (min–max)",
                "MB/s",
                "floor s",
                "fixed ÷ floor",
            ],
            table,
        ),
        Table(
            "Where the steady iteration's time goes (medians, seconds).",
            ["weights", "K", *dense.PARTS],
            [
                [
                    f"{r['million']:g}M",
                    r["segments"],
                    *(r["medians"].get(p, 0.0) for p in dense.PARTS),
                ]
                for r in rows
            ],
        ),
    ]
    if floors:
        tables.append(
            Table(
                "The floor: CPU seconds of each primitive (medians), their sum, and the sum over "
                "the CPUs.",
                ["weights", *primitives.PARTS, "all CPU", "CPUs", "floor s"],
                [
                    [
                        f"{m:g}M",
                        *(f["cpu_median"][p] for p in primitives.PARTS),
                        f["cpu_total"],
                        f["cpus"],
                        f["floor_seconds"],
                    ]
                    for m, f in sorted(floors.items())
                ],
            )
        )
    return Outcome(
        tables, targets, {"rows": rows, "floors": {str(m): f for m, f in floors.items()}}
    )


BENCHMARK = Benchmark(
    name="fixed_cost",
    title="Fixed cost of an iteration against its floor",
    question=(
        "What does one iteration cost beyond training its batches, by model size, and how far "
        "is that from the least the data path can cost on this machine?"
    ),
    method=(
        "A dense model (8×8×1 input, Dense(H, relu), Dense(10)) of each size, one buffer of 16 "
        'images per segment, batch 16, `merge="average"`: each fit runs three iterations in '
        "fresh segment processes and the third, steady one is timed; fixed cost = its seconds "
        "(with storing its row) minus the same batches trained in-process. Rounds interleave the "
        "sizes. The floor (`bench/suite/primitives.py`) moves the same bytes with PostgreSQL's "
        "COPY, a PL/Python function returning its argument, numpy's float64 average and Keras' "
        "variable loads, no gpcnn code in the path, and sums their CPU (server processes and "
        "client) over the CPUs; the training, the retention's delete and later WAL writes are "
        "not in it, so the true floor is higher."
    ),
    defaults={
        "sizes": [1, 25, 100],
        "segments": [2],
        "rounds": 5,
        "floor": True,
        "floor_rounds": 5,
    },
    quick={"sizes": [1], "rounds": 1, "floor_rounds": 1},
    run=run,
)
