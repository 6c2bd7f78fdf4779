"""The client's merge of K result streams: as they arrive (``StreamingAverage``, what gpcnn does)
against after every row came back (what it did before), at 25M weights, K = 2 (issue 12).

    .venv/bin/python bench/client_merge.py [--repeats 5]

Same model, table and settings as ``bench/overhead.py``; fits of three iterations in fresh
segment processes, the variants interleaved; the report is the median ``seconds`` (storing not
included) of iterations 2 and 3 per variant.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead  # its settings first: TF threads, the tables

import gpcnn
from gpcnn.engines import dispatch
from gpcnn.fit import runs

STREAMING = dispatch.StreamingAverage


class MergedAtTheEnd(STREAMING):
    """Every row kept until the streams end, then merged: the client holds K trained vectors."""

    def __init__(self, keys, chunk_values) -> None:
        super().__init__(keys, chunk_values)
        self.rows: list[tuple] = []
        self._rows_lock = threading.Lock()

    def add(self, row: tuple) -> None:
        with self._rows_lock:
            self.rows.append(row)

    def close(self) -> None:
        for row in sorted(self.rows, key=lambda r: r[1] >= 0):  # small states first
            STREAMING.add(self, row)
        STREAMING.close(self)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    db = gpcnn.connect()
    gpcnn.install(db)
    table = overhead.table_for(db, 2)
    variants = {"as they arrive": STREAMING, "at the end": MergedAtTheEnd}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(1, args.repeats + 1):
        for name, merger in variants.items():
            dispatch.StreamingAverage = merger
            try:
                est = overhead.estimator(db, overhead.dense_model(25), iterations=3)
                with est:
                    est.fit(table)
                gpcnn.release_sessions()
            finally:
                dispatch.StreamingAverage = STREAMING
            steady = [row["seconds"] for row in est.history_[1:]]
            seconds[name] += steady
            runs.delete_runs(db, [est.run_id_])
            print(f"round {round_} {name}: {[round(s, 3) for s in steady]}", flush=True)
    for name, values in seconds.items():
        print(f"{name}: median {statistics.median(values):.3f} s over {len(values)} iterations")


if __name__ == "__main__":
    main()
