"""Loading speed: ``gpcnn.load_images`` of the 60k Fashion-MNIST training set into 2 and 4
segments, next to a raw binary ``COPY`` of the same rows into an unpartitioned table.

    .venv/bin/python bench/load.py [--database URL] [--repeats 3]

MB/s counts the payload: image bytes (uint8) plus label bytes (int32), 1 MB = 10^6 bytes.
``load_images`` is timed end to end (validate, shuffle, pack, staging table, COPY, swap,
catalog row, commit). The raw COPY is timed from COPY to commit into a table created beforehand,
with the same columns (bytea with STORAGE EXTERNAL) and the same binary COPY bytes, built in
memory before the clock starts: it is the server's ingest ceiling. The measurements are
interleaved (raw, K=2, K=4, raw, ...) so that drift on the machine hits all of them alike, and a
CHECKPOINT before each keeps one run's dirty pages out of the next one's time.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import sqlalchemy as sa

import gpcnn
from gpcnn import datasets
from gpcnn.data import tables
from gpcnn.engines.copying import copy

SCHEMA = "gpcnn_bench"
TARGET_MBS = 100.0
TARGET_RATIO = 0.5


def _raw_copy_bytes(x: np.ndarray, y: np.ndarray, segments: int, seed: int) -> bytes:
    """The exact binary COPY stream load_images sends for the same data."""
    images = tables.ArrayImages(x, y)
    order = np.random.default_rng(seed).permutation(len(images))
    size = tables.default_buffer_size(len(images), segments, images.image_shape)
    buffers = tables.plan_buffers(len(images), list(range(segments)), size)
    ids = tables.validate_ids(None, len(images))
    return b"".join(tables.copy_stream(tables.source_rows(images, buffers, order, ids)))


def _checkpoint(engine: sa.Engine) -> None:
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CHECKPOINT")
    except sa.exc.DBAPIError:  # not a superuser: measure without
        pass


def time_raw_copy(engine: sa.Engine, backend, data: bytes) -> float:
    raw = tables.TableName(SCHEMA, "raw_copy")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {backend.quote(SCHEMA)}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {raw.sql(backend)}")
        conn.exec_driver_sql(f"CREATE TABLE {raw.sql(backend)} ({backend.IMAGE_COLUMNS})")
        conn.exec_driver_sql(f"ALTER TABLE {raw.sql(backend)} {backend.EXTERNAL_STORAGE}")
    _checkpoint(engine)
    conn = engine.raw_connection()
    try:
        start = time.perf_counter()
        copy(conn, backend.copy_sql(raw), io.BytesIO(data))
        conn.commit()
        return time.perf_counter() - start
    finally:
        conn.close()


def time_load(db: gpcnn.Database, x, y, segments: int, seed: int) -> float:
    engine, backend = db.engine, db.backend
    table = tables.TableName(SCHEMA, f"fashion_k{segments}")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {backend.quote(SCHEMA)}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table.sql(backend)}")
    _checkpoint(engine)
    start = time.perf_counter()
    info = tables.load_images(
        db,
        table,
        x,
        y,
        segments=segments,
        seed=seed,
        replace=True,
        progress=False,
        source="bench/load.py",
    )
    elapsed = time.perf_counter() - start
    assert info.images == len(x) and info.segments == segments
    return elapsed


def machine() -> str:
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} CPUs, {ram:.0f} GiB RAM, {platform.platform()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="SQLAlchemy URL (default: the embedded PostgreSQL)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--segments", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args(argv)

    data = datasets.load_fashion_mnist()
    x, y = data.x_train, data.y_train
    payload = x.size * np.dtype(np.uint8).itemsize + len(y) * np.dtype("<i4").itemsize
    mb = payload / 1e6

    db = gpcnn.connect(args.database, schema=SCHEMA)
    engine, backend = db.engine, db.backend
    with engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version()")).scalar()
    print(f"machine: {machine()}")
    print(f"server:  {version}")
    print(f"data:    Fashion-MNIST train, {len(x):,} images {x.shape[1:]}, payload {mb:.1f} MB")
    print(f"repeats: {args.repeats} (median reported)\n")

    raw_bytes = {k: _raw_copy_bytes(x, y, k, args.seed) for k in args.segments}
    times: dict[str, list[float]] = {"raw": []}
    for k in args.segments:
        times[f"k{k}"] = []
    for _ in range(args.repeats):
        # the raw COPY sends the rows of the first K (a different K only regroups the rows)
        times["raw"].append(time_raw_copy(engine, backend, raw_bytes[args.segments[0]]))
        for k in args.segments:
            times[f"k{k}"].append(time_load(db, x, y, k, args.seed))

    raw_rate = mb / statistics.median(times["raw"])
    print("| what | segments | median s | median MB/s | runs (MB/s) | × raw COPY |")
    print("|---|---|---|---|---|---|")

    def row(label: str, segments: str, runs: list[float]) -> float:
        rate = mb / statistics.median(runs)
        each = ", ".join(f"{mb / t:.0f}" for t in runs)
        print(
            f"| {label} | {segments} | {statistics.median(runs):.3f} | {rate:.0f} | {each} "
            f"| {rate / raw_rate:.2f} |"
        )
        return rate

    row("raw binary COPY, unpartitioned", "–", times["raw"])
    ok = True
    for k in args.segments:
        rate = row("`gpcnn.load_images`", str(k), times[f"k{k}"])
        ok &= rate >= TARGET_MBS and rate >= TARGET_RATIO * raw_rate
    print(
        f"\ntargets (>= {TARGET_MBS:.0f} MB/s and >= {TARGET_RATIO}x raw COPY): "
        f"{'met' if ok else 'MISSED'}"
    )
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {backend.quote(SCHEMA)} CASCADE")
    db.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
