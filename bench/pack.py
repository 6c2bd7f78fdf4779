"""pack_table vs load_images: the 60,000 Fashion-MNIST training images, stored as one smallint[]
row each (MADlib's layout), packed inside the server, against load_images of the same arrays.

    .venv/bin/python bench/pack.py [--database URL] [--repeats 3] [--segments 2]

Both produce the same image table (tests/test_packing.py checks that). Reported: median seconds
and MB/s of image payload (uint8 pixels + int32 labels) over interleaved repetitions; the source
table is built once, by COPY, before timing.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import gpcnn
from gpcnn import datasets
from gpcnn.engines.catalog import relation_exists
from gpcnn.engines.copying import copy
from gpcnn.engines.packing import PackingSource

SCHEMA = "gpcnn_bench_pack"  # gpcnn's functions and the image tables
DATA = "gpcnn_bench_pack_rows"  # the source table
SOURCE = f"{DATA}.fashion_rows"


def build_source(db: gpcnn.Database, x: np.ndarray, y: np.ndarray) -> None:
    """One row per image: (id bigint, img smallint[], label integer), loaded by text COPY."""
    lines = io.StringIO()
    flat = x.reshape(len(x), -1)
    for i in range(len(x)):
        lines.write(f"{i}\t{{{','.join(map(str, flat[i].tolist()))}}}\t{int(y[i])}\n")
    lines.seek(0)
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {DATA} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {DATA}")
        conn.exec_driver_sql(f"CREATE TABLE {SOURCE} (id bigint, img smallint[], label integer)")
        copy(conn.connection.driver_connection, f"COPY {SOURCE} FROM STDIN", lines)
        conn.exec_driver_sql(f"ANALYZE {SOURCE}")


def time_parts(db: gpcnn.Database, count: int, length: int) -> dict[str, float]:
    """Where pack_table's time goes: its statements, each alone, once (the range check runs
    alone only to name a refused row; otherwise the fill checks as it converts)."""
    queries = PackingSource(db.backend, SOURCE, "img", "label", "id", "smallint[]")
    parts = {
        "the checks' one scan (counts, NULLs)": lambda conn: queries.summary(conn),
        "the image lengths": lambda conn: queries.lengths(conn),
        "the range check alone (numpy on array_bytes)": lambda conn: queries.first_out_of_range(
            conn, count, length, 255.0
        ),
    }
    times = {}
    with db.connect() as conn:
        for what, run in parts.items():
            start = time.perf_counter()
            run(conn)
            times[what] = time.perf_counter() - start
    return times


def time_pack(db: gpcnn.Database, segments: int) -> float:
    start = time.perf_counter()
    gpcnn.pack_table(
        db, SOURCE, f"{SCHEMA}.packed", x_column="img", y_column="label", id_column="id",
        segments=segments, replace=True,
    )  # fmt: skip
    return time.perf_counter() - start


def time_load(db: gpcnn.Database, x, y, segments: int) -> float:
    start = time.perf_counter()
    gpcnn.load_images(db, f"{SCHEMA}.loaded", x, y, segments=segments, replace=True, progress=False)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="SQLAlchemy URL (default: the embedded PostgreSQL)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--segments", type=int, default=2)
    args = parser.parse_args(argv)

    data = datasets.load_fashion_mnist()
    x, y = data.x_train, data.y_train
    mb = (x.size + 4 * len(y)) / 1e6
    db = gpcnn.connect(args.database, schema=SCHEMA)
    gpcnn.install(db)
    started = time.perf_counter()
    build_source(db, x, y)
    print(f"source: {len(x):,} smallint[] rows built in {time.perf_counter() - started:.1f} s")
    times: dict[str, list[float]] = {"pack_table": [], "load_images": []}
    for _ in range(args.repeats):  # interleaved: the machine is shared and noisy
        times["pack_table"].append(time_pack(db, args.segments))
        times["load_images"].append(time_load(db, x, y, args.segments))
    print(f"\nK = {args.segments}, payload {mb:.1f} MB, {args.repeats} interleaved repetitions\n")
    print("| what | median s | median MB/s | runs (s) |")
    print("|---|---|---|---|")
    for what, runs in times.items():
        median = statistics.median(runs)
        each = ", ".join(f"{t:.1f}" for t in runs)
        print(f"| `{what}` | {median:.1f} | {mb / median:.1f} | {each} |")
    ratio = statistics.median(times["pack_table"]) / statistics.median(times["load_images"])
    print(f"\npack_table / load_images, median seconds: {ratio:.1f}x\n\nparts, each alone, once:")
    for what, seconds in time_parts(db, len(x), x[0].size).items():
        print(f"  {what}: {seconds:.2f} s")
    for table in ("packed", "loaded"):
        gpcnn.drop_table(db, f"{SCHEMA}.{table}")
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {DATA} CASCADE")
        assert not relation_exists(conn, SOURCE)
    gpcnn.uninstall(db)
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
