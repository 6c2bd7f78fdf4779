"""Where one statement's merge runs, on Greenplum: in the database against in the client, beside
the embedded PostgreSQL, interleaved (``Backend.database_merge_bytes``; issue 25).

    .venv/bin/python bench/merge_place.py postgresql://gpadmin@127.0.0.1:7000/gpcnn \
        [--sizes 1 25] [--rounds 3] [--checkpoints replicated|COLUMNS] \
        [--out bench/results/merge-place.json]

Each round runs, per size, ``bench/overhead.py``'s three-iteration fit (K = 2, its dense model and
table) on PostgreSQL, on Greenplum with the segments merging (the limit 0) and on Greenplum with
the client merging (no limit), in that order, and prints each steady iteration's fixed cost and
parts; then the medians and their ratios to PostgreSQL's. ``--checkpoints replicated`` or
``--checkpoints COLUMNS`` compares, instead of the two merge places, the shipped code
(``checkpoints`` distributed by ``run_id``: each stored start broadcast from the primary that holds
it) with the same in a schema of its own whose ``checkpoints`` are ``DISTRIBUTED REPLICATED`` (a
copy on every primary) or ``DISTRIBUTED BY (COLUMNS)`` (``run_id,chunk``: broadcast from every
primary).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead  # its settings first: TF threads, the tables

import gpcnn

PLACES = {"postgresql": None, "greenplum, database merge": 0, "greenplum, client merge": 1 << 62}
DISTRIBUTED_SCHEMA = "gpcnn_bench_distributed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("greenplum", help="the Greenplum URL")
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 25])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkpoints", metavar="COLUMNS", help="replicated, or e.g. run_id,chunk")
    parser.add_argument("--out", type=Path, default=Path("bench/results/merge-place.json"))
    args = parser.parse_args(argv)
    gp, pg = gpcnn.connect(args.greenplum), gpcnn.connect(None)
    handles = {"postgresql": pg}
    if args.checkpoints:
        distributed = gpcnn.connect(args.greenplum, schema=DISTRIBUTED_SCHEMA)
        quote = distributed.backend.quote
        if args.checkpoints == "replicated":
            clause = "REPLICATED"
        else:
            clause = f"BY ({', '.join(quote(c.strip()) for c in args.checkpoints.split(','))})"
        handles.update({"greenplum": gp, f"greenplum, checkpoints {clause}": distributed})
    else:
        handles.update(dict.fromkeys(list(PLACES)[1:], gp))
    tables = {}
    for place, db in handles.items():
        gpcnn.install(db)
        overhead.SCHEMA = f"gpcnn_bench_place_{len(tables)}"  # a table per handle
        tables[place] = overhead.table_for(db, 2)
    if args.checkpoints:
        with distributed.begin() as conn:
            conn.exec_driver_sql(
                f"ALTER TABLE {distributed.backend.qschema}.checkpoints SET DISTRIBUTED {clause}"
            )
    fixed = defaultdict(list)
    for round_ in range(1, args.rounds + 1):
        for million in args.sizes:
            for place, db in handles.items():
                if place in PLACES and PLACES[place] is not None:
                    db.backend.database_merge_bytes = PLACES[place]
                got: dict = defaultdict(list)
                _, parts = overhead._one_fit(db, tables[place], million, 2, got)
                fixed[(million, place)].append(got["fixed"][-1])
                print(f"round {round_} {million:g}M {place}: fixed {got['fixed'][-1]:.3f} s "
                      f"({parts})", flush=True)  # fmt: skip
    rows = []
    for million in args.sizes:
        base = statistics.median(fixed[(million, "postgresql")])
        for place in handles:
            median = statistics.median(fixed[(million, place)])
            rows.append({"million": million, "place": place, "fixed": fixed[(million, place)],
                         "median": median, "ratio": median / base})  # fmt: skip
            print(f"{million:g}M {place}: median fixed {median:.3f} s, {median / base:.2f}x")
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
