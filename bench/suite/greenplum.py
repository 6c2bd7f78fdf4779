"""Benchmark ``greenplum``: an iteration's fixed cost on Greenplum against PostgreSQL."""

from __future__ import annotations

from .base import Benchmark, Context, Outcome, Table, ratio_target

LIMIT = 1.5
NEEDS = (
    "it needs a Greenplum cluster: `.venv/bin/python bench/run.py greenplum --greenplum "
    "postgresql://gpadmin@HOST:PORT/DATABASE` (docs/greenplum.md says how to build one)."
)


def run(context: Context) -> Outcome:
    if not context.greenplum:
        return Outcome(skipped=NEEDS)
    import gpcnn

    from . import dense

    with gpcnn.connect(context.greenplum) as db:
        kind = db.backend.kind
    if kind != "greenplum":
        raise SystemExit(f"--greenplum {context.greenplum} is a {kind} server, not Greenplum")
    configs = [(float(m), 2) for m in context["sizes"]]
    rows = dense.rounds(configs, context["rounds"], urls=(context.database, context.greenplum))
    return outcome(rows)


def outcome(rows: list[dict]) -> Outcome:
    """Tables and targets from the fixed-cost rows of both engines."""
    by = {(r["million"], r["engine"]): r for r in rows}
    sizes = sorted({r["million"] for r in rows})
    table, targets = [], []
    for m in sizes:
        pg, gp = by[(m, "postgresql")], by[(m, "greenplum")]
        ratio = gp["medians"]["fixed"] / pg["medians"]["fixed"]
        for r in (pg, gp):
            table.append(
                [
                    f"{m:g}M",
                    r["engine"],
                    r["medians"]["seconds"],
                    r["medians"]["fixed"],
                    f"{min(r['fixed_rounds']):.3f}–{max(r['fixed_rounds']):.3f}",
                    r["medians"].get("query", 0.0),
                    r["medians"].get("store", 0.0),
                    f"{r['medians']['fixed'] / pg['medians']['fixed']:.2f}",
                ]
            )
        targets.append(
            ratio_target(
                f"fixed cost on Greenplum ≤ {LIMIT}× PostgreSQL's at {m:g}M, K = 2", ratio, LIMIT
            )
        )
    return Outcome(
        [
            Table(
                "Medians over the interleaved rounds, seconds.",
                [
                    "weights",
                    "engine",
                    "iteration s",
                    "fixed s",
                    "fixed s (min–max)",
                    "query s",
                    "store s",
                    "÷ PostgreSQL",
                ],
                table,
            )
        ],
        targets,
        {"rows": rows},
    )


BENCHMARK = Benchmark(
    name="greenplum",
    title="Greenplum against PostgreSQL",
    question="What does an iteration cost on Greenplum, against PostgreSQL on the same machine?",
    method=(
        "The fixed-cost benchmark's steady iteration (its dense model, K = 2, one buffer of 16 "
        "images per key) on the PostgreSQL of `--database` (default: the embedded one) and on the "
        "Greenplum of `--greenplum`, interleaved: each round runs every size on both engines in "
        "turn. Runs only when given a Greenplum URL."
    ),
    defaults={"sizes": [1, 25], "rounds": 5},
    quick={"sizes": [1], "rounds": 1},
    run=run,
)
