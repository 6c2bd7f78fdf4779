"""Benchmark ``loading``: ``gpcnn.load_images`` and ``gpcnn.pack_table`` of the 60,000
Fashion-MNIST training images against a raw binary COPY of the same rows."""

from __future__ import annotations

import io
import statistics
import time

from .base import Benchmark, Context, Outcome, Table, Target

SCHEMA = "gpcnn_bench_load"  # gpcnn's functions and the image tables
ROWS = "gpcnn_bench_load_rows"  # pack_table's source: one smallint[] row per image
TARGET_MBS = 100.0
TARGET_RATIO = 0.5
SKEW_COUNT_SHARE = 0.05  # counting the labels per segment costs a load at most 5 %


def raw_copy_bytes(x, y, segments: int, seed: int) -> bytes:
    """The exact binary COPY stream load_images sends for the same data."""
    import numpy as np

    from gpcnn.data import tables

    images = tables.ArrayImages(x, y)
    order = np.random.default_rng(seed).permutation(len(images))
    size = tables.default_buffer_size(len(images), segments, images.image_shape)
    buffers = tables.plan_buffers(len(images), list(range(segments)), size)
    ids = tables.validate_ids(None, len(images))
    return b"".join(tables.copy_stream(tables.source_rows(images, buffers, order, ids)))


def checkpoint(db) -> None:
    """A CHECKPOINT, so that one run's dirty pages stay out of the next one's time (skipped
    when not a superuser)."""
    import sqlalchemy as sa

    try:
        with db.engine.begin() as conn:
            conn.exec_driver_sql("CHECKPOINT")
    except sa.exc.DBAPIError:
        pass


def time_raw_copy(db, data: bytes) -> float:
    """Seconds from COPY to commit of ``data`` into a fresh table with the image columns."""
    from gpcnn.data import tables
    from gpcnn.engines.copying import copy

    backend = db.backend
    raw = tables.TableName(SCHEMA, "raw_copy")
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {raw.sql(backend)}")
        conn.exec_driver_sql(f"CREATE TABLE {raw.sql(backend)} ({backend.IMAGE_COLUMNS})")
        conn.exec_driver_sql(f"ALTER TABLE {raw.sql(backend)} {backend.EXTERNAL_STORAGE}")
    checkpoint(db)
    conn = db.engine.raw_connection()
    try:
        start = time.perf_counter()
        copy(conn, backend.copy_sql(raw), io.BytesIO(data))
        conn.commit()
        return time.perf_counter() - start
    finally:
        conn.close()


def time_load(db, x, y, segments: int, seed: int) -> float:
    """``load_images`` end to end: validate, shuffle, pack, staging table, COPY, swap, commit."""
    import gpcnn

    checkpoint(db)
    start = time.perf_counter()
    gpcnn.load_images(
        db,
        f"{SCHEMA}.loaded_k{segments}",
        x,
        y,
        segments=segments,
        seed=seed,
        replace=True,
        progress=False,
    )
    return time.perf_counter() - start


def build_source(db, x, y) -> None:
    """One row per image: (id bigint, img smallint[], label integer), loaded by text COPY."""
    from gpcnn.engines.copying import copy

    lines = io.StringIO()
    flat = x.reshape(len(x), -1)
    for i in range(len(x)):
        lines.write(f"{i}\t{{{','.join(map(str, flat[i].tolist()))}}}\t{int(y[i])}\n")
    lines.seek(0)
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {ROWS} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {ROWS}")
        conn.exec_driver_sql(
            f"CREATE TABLE {ROWS}.images (id bigint, img smallint[], label integer)"
        )
        copy(conn.connection.driver_connection, f"COPY {ROWS}.images FROM STDIN", lines)
        conn.exec_driver_sql(f"ANALYZE {ROWS}.images")


def time_pack(db, segments: int, target: str = "packed", **layout) -> float:
    """``pack_table`` of the source rows into an image table, end to end; ``layout``:
    ``distribute_by`` or ``shared_sample``."""
    import gpcnn

    checkpoint(db)
    start = time.perf_counter()
    gpcnn.pack_table(
        db,
        f"{ROWS}.images",
        f"{SCHEMA}.{target}",
        x_column="img",
        y_column="label",
        id_column="id",
        segments=segments,
        replace=True,
        **layout,
    )
    return time.perf_counter() - start


def time_skew_count(db, segments: int) -> float:
    """The label-skew count that every load and pack runs, alone, on the table just loaded."""
    import gpcnn
    from gpcnn.engines.label_skew_sql import label_counts

    info = gpcnn.describe_table(db, f"{SCHEMA}.loaded_k{segments}")
    start = time.perf_counter()
    with db.connect() as conn:
        label_counts(conn, info.table.sql(db.backend), info.keys, info.num_classes)
    return time.perf_counter() - start


def time_redeal(db, segments: int) -> float:
    """``redeal`` of the table packed by label (the most skewed layout) into an IID one."""
    import gpcnn

    checkpoint(db)
    start = time.perf_counter()
    gpcnn.redeal(db, f"{SCHEMA}.by_label", f"{SCHEMA}.redealt", segments=segments, replace=True)
    return time.perf_counter() - start


def run(context: Context) -> Outcome:
    import gpcnn
    from gpcnn import datasets

    data = datasets.load_fashion_mnist()
    x, y = data.x_train, data.y_train
    mb = (x.size + 4 * len(y)) / 1e6
    segments, seed = list(context["segments"]), context["seed"]
    db = gpcnn.connect(context.database, schema=SCHEMA)
    gpcnn.install(db)
    if context["pack"]:
        build_source(db, x, y)
    # the raw COPY sends the rows of the first K (a different K only regroups the rows)
    raw = raw_copy_bytes(x, y, segments[0], seed)
    variants = {"raw binary COPY, unpartitioned": lambda: time_raw_copy(db, raw)}
    for k in segments:
        variants[f"`gpcnn.load_images`, K = {k}"] = lambda k=k: time_load(db, x, y, k, seed)
    k = segments[0]
    variants[f"the label-skew count alone, K = {k}"] = lambda: time_skew_count(db, k)
    if context["pack"]:
        variants[f"`gpcnn.pack_table`, K = {k}"] = lambda: time_pack(db, k)
        variants[f"`gpcnn.pack_table`, K = {k}, `distribute_by='label'`"] = lambda: time_pack(
            db, k, "by_label", distribute_by="label"
        )
        variants[f"`gpcnn.redeal` of that table, K = {k}"] = lambda: time_redeal(db, k)
        variants[f"`gpcnn.pack_table`, K = {k}, `shared_sample=0.05`"] = lambda: time_pack(
            db, k, "shared", shared_sample=0.05
        )
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(1, context["rounds"] + 1):
        for name, measure in variants.items():
            times[name].append(measure())
            print(f"round {round_} {name}: {times[name][-1]:.3f} s", flush=True)
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {ROWS} CASCADE")
    gpcnn.uninstall(db)
    db.close()
    return outcome(times, mb)


def outcome(times: dict[str, list[float]], mb: float) -> Outcome:
    """Tables and targets from each variant's seconds per round (the raw COPY first)."""
    medians = {name: statistics.median(runs) for name, runs in times.items()}
    raw_name = next(iter(times))
    raw_rate = mb / medians[raw_name]
    rows = [
        [
            name,
            medians[name],
            mb / medians[name],
            ", ".join(f"{mb / t:.0f}" for t in runs),
            f"{mb / medians[name] / raw_rate:.2f}",
        ]
        for name, runs in times.items()
    ]
    targets = []
    count = next((name for name in times if "skew count" in name), None)
    if count is not None:
        load = next(name for name in times if "load_images" in name)
        share = statistics.median(c / t for c, t in zip(times[count], times[load], strict=True))
        targets.append(
            Target(
                f"the label-skew count ≤ {SKEW_COUNT_SHARE:.0%} of {load} (paired rounds)",
                f"{share:.1%}",
                share <= SKEW_COUNT_SHARE,
            )
        )
    for name in times:
        rate = mb / medians[name]
        if "load_images" in name:
            targets.append(
                Target(
                    f"{name} ≥ {TARGET_MBS:g} MB/s and ≥ {TARGET_RATIO}× the raw COPY",
                    f"{rate:.0f} MB/s, {rate / raw_rate:.2f}×",
                    rate >= TARGET_MBS and rate >= TARGET_RATIO * raw_rate,
                )
            )
        if "pack_table" in name or "redeal" in name:
            targets.append(
                Target(
                    f"{name}: none set (reported against the raw COPY)",
                    f"{rate:.0f} MB/s, {rate / raw_rate:.2f}×",
                    None,
                )
            )
    table = Table(
        f"Payload {mb:.1f} MB (uint8 pixels + int32 labels, 1 MB = 10⁶ bytes); medians over the "
        "rounds.",
        ["what", "median s", "median MB/s", "rounds (MB/s)", "× raw COPY"],
        rows,
    )
    return Outcome([table], targets, {"payload_mb": mb, "seconds": times})


BENCHMARK = Benchmark(
    name="loading",
    title="Loading and packing",
    question=(
        "How fast do images reach an image table: from client arrays (`load_images`), and from "
        "a table of one row per image already in the database (`pack_table`), against the "
        "server's own ingest ceiling?"
    ),
    method=(
        "The 60,000 Fashion-MNIST training images (28×28 uint8). `load_images` is timed end to "
        "end (validate, shuffle, pack, staging table, COPY, swap, catalog row, commit); "
        "`pack_table` likewise, from `(id bigint, img smallint[], label integer)` rows built by "
        "COPY before timing; the raw COPY sends the same binary COPY bytes, built in memory "
        "before the clock starts, into a fresh table with the same columns (bytea with "
        "`STORAGE EXTERNAL`), timed from COPY to commit: the server's ingest ceiling. The "
        "variants are interleaved in each round, a CHECKPOINT before each. The label-skew count "
        "(one aggregate statement over the loaded table, which every load and pack runs) is "
        "also timed alone; `distribute_by='label'` packs the most skewed layout, which `redeal` "
        "deals again IID; `shared_sample=0.05` adds 5 % of the images to every segment."
    ),
    defaults={"segments": [2, 4], "rounds": 3, "pack": True, "seed": 0},
    quick={"rounds": 1},
    run=run,
)
