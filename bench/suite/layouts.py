"""Benchmark ``layouts``: packing a table on Greenplum, IID dealing against ``distribute_by``, in
seconds and in rows moved between segments, beside the two floors of a copy: rows kept
where they are and rows rehashed to other segments."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

from .base import Benchmark, Context, Outcome, Table
from .loading import ROWS, build_source, checkpoint

SCHEMA = "gpcnn_bench_layouts"  # gpcnn's functions and the image tables
SITES = 16
NEEDS = (
    "it needs a Greenplum cluster: `.venv/bin/python bench/run.py layouts --greenplum "
    "postgresql://gpadmin@HOST:PORT/DATABASE` (docs/greenplum.md says how to build one)."
)
MOTIONS = ("Redistribute Motion", "Broadcast Motion", "Gather Motion", "Explicit Redistribute")


def add_sites(db, labels, seed: int) -> None:
    """A ``site`` column (0..SITES-1) drawn per image from its label's own mix of sites (a
    Dirichlet(0.5) per label: each class comes mostly from a few sites, as images grouped by
    camera or ward would), and the source redistributed by it, as a table ``DISTRIBUTED BY
    (site)`` holds its rows."""
    import numpy as np

    rng = np.random.default_rng(seed)
    mix = rng.dirichlet([0.5] * SITES, size=int(labels.max()) + 1)
    sites = np.array([rng.choice(SITES, p=mix[c]) for c in labels])
    with db.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {ROWS}.images ADD COLUMN site integer")
        conn.exec_driver_sql(
            f"UPDATE {ROWS}.images i SET site = s.site FROM unnest(%(ids)s::bigint[], "
            "%(sites)s::integer[]) AS s(id, site) WHERE i.id = s.id",
            {"ids": list(range(len(sites))), "sites": sites.tolist()},
        )
        conn.exec_driver_sql(f"ALTER TABLE {ROWS}.images SET DISTRIBUTED BY (site)")
        conn.exec_driver_sql(f"ANALYZE {ROWS}.images")


@contextmanager
def fill_plans(db, plans: list[str]):
    """The plan of every packing statement run meanwhile (``EXPLAIN`` on the same cursor just
    before it runs: nothing is executed twice), appended to ``plans``, its lines cut at 160
    characters (the dealing's bound arrays appear in it whole)."""
    import sqlalchemy as sa

    def explain(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("INSERT INTO") and "GROUP BY d.key" in statement:
            cursor.execute("EXPLAIN " + statement, parameters)
            lines = (row[0] for row in cursor.fetchall())  # the bound arrays shortened
            plans.append(
                "\n".join(line if len(line) <= 160 else line[:160] + "…" for line in lines)
            )

    sa.event.listen(db.engine, "before_cursor_execute", explain)
    try:
        yield
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", explain)


def motions(plan: str) -> list[str]:
    """The plan's motion nodes, as EXPLAIN names them (e.g. 'Redistribute Motion 2:2')."""
    found = []
    for line in plan.splitlines():
        for motion in MOTIONS:
            if motion in line:
                found.append(line.strip().lstrip("->").strip().split("  (")[0])
    return found


def time_pack(db, segments: int, target: str, **layout) -> float:
    """``pack_table`` of the source into ``target``, end to end; ``layout``: ``distribute_by``."""
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


def time_copy(db, target: str, distribution: str) -> float:
    """The floor: the source's rows copied into a new table (``CREATE TABLE AS``), committed."""
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {SCHEMA}.{target}")
    checkpoint(db)
    start = time.perf_counter()
    with db.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {SCHEMA}.{target} AS SELECT * FROM {ROWS}.images {distribution}"
        )
    return time.perf_counter() - start


def moved_packed(db, target: str) -> int:
    """How many of a packed table's images sit on another segment than their source row."""
    import numpy as np

    with db.connect() as conn:
        placed = conn.exec_driver_sql(f"SELECT id, gp_segment_id FROM {ROWS}.images").all()
        source = np.empty(len(placed), dtype=np.int64)
        for image_id, segment in placed:
            source[image_id] = segment
        moved = 0
        for segment, ids in conn.exec_driver_sql(
            f"SELECT gp_segment_id, ids FROM {SCHEMA}.{target}"
        ):
            moved += int(np.count_nonzero(source[np.frombuffer(ids, dtype="<i8")] != segment))
    return moved


def moved_copied(db, target: str) -> int:
    """How many of a copy's rows sit on another segment than their source row."""
    with db.connect() as conn:
        return conn.exec_driver_sql(
            f"SELECT count(*) FROM (SELECT id, gp_segment_id AS seg FROM {ROWS}.images) s "
            f"JOIN (SELECT id, gp_segment_id AS seg FROM {SCHEMA}.{target}) c USING (id) "
            "WHERE s.seg <> c.seg"
        ).scalar()


def run(context: Context) -> Outcome:
    if not context.greenplum:
        return Outcome(skipped=NEEDS)
    import gpcnn
    from gpcnn import datasets

    db = gpcnn.connect(context.greenplum, schema=SCHEMA)
    if db.backend.kind != "greenplum":
        raise SystemExit(f"--greenplum {context.greenplum} is a {db.backend.kind} server")
    gpcnn.install(db)
    data = datasets.load_fashion_mnist()
    build_source(db, data.x_train, data.y_train)
    add_sites(db, data.y_train, context["seed"])
    k = db.backend.default_segments()
    variants = {
        "copy, rows kept on their segment (`DISTRIBUTED BY (site)`)": (
            lambda: time_copy(db, "kept", "DISTRIBUTED BY (site)"),
            lambda: moved_copied(db, "kept"),
        ),
        "copy, rows rehashed (`DISTRIBUTED BY (id)`)": (
            lambda: time_copy(db, "rehashed", "DISTRIBUTED BY (id)"),
            lambda: moved_copied(db, "rehashed"),
        ),
        f"`pack_table`, IID, K = {k}": (
            lambda: time_pack(db, k, "iid"),
            lambda: moved_packed(db, "iid"),
        ),
        f"`pack_table`, `distribute_by='site'`, K = {k}": (
            lambda: time_pack(db, k, "by_site", distribute_by="site"),
            lambda: moved_packed(db, "by_site"),
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(1, context["rounds"] + 1):
        for name, (measure, _) in variants.items():
            times[name].append(measure())
            print(f"round {round_} {name}: {times[name][-1]:.3f} s", flush=True)
    moved = {name: count() for name, (_, count) in variants.items()}
    plans: list[str] = []
    with fill_plans(db, plans):
        time_pack(db, k, "iid")
        time_pack(db, k, "by_site", distribute_by="site")
    skew = {
        table: tuple(gpcnn.describe_table(db, f"{SCHEMA}.{table}").label_skew)
        for table in ("iid", "by_site")
    }
    with db.connect() as conn:
        row_bytes = float(
            conn.exec_driver_sql(f"SELECT avg(pg_column_size(i.*)) FROM {ROWS}.images i").scalar()
        )
        images = conn.exec_driver_sql(f"SELECT count(*) FROM {ROWS}.images").scalar()
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {ROWS} CASCADE")
    gpcnn.uninstall(db)
    db.close()
    return outcome(times, moved, images, row_bytes, {"iid": plans[0], "by_site": plans[1]}, skew)


def outcome(
    times: dict[str, list[float]],
    moved: dict[str, int],
    images: int,
    row_bytes: float,
    plans: dict[str, str],
    skew: dict[str, tuple[float, float]],
) -> Outcome:
    """The table of each variant's seconds and rows moved, the floors first."""
    floor = statistics.median(next(iter(times.values())))
    rows = [
        [
            name,
            round(statistics.median(runs), 3),
            ", ".join(f"{t:.2f}" for t in runs),
            f"{statistics.median(runs) / floor:.2f}",
            moved[name],
            f"{moved[name] / images:.1%}",
            round(moved[name] * row_bytes / 1e6, 1),
        ]
        for name, runs in times.items()
    ]
    table = Table(
        f"{images:,} source rows of {row_bytes:.0f} bytes on average (`id bigint, img "
        "smallint[], label integer, site integer`); medians over the rounds; moved: rows that "
        "end on another segment than their source row, each of which crossed the interconnect "
        "at least once.",
        ["what", "median s", "rounds s", "× kept copy", "rows moved", "share", "MB moved"],
        rows,
    )
    plan_rows = [
        [name, f"{skew[name][0]:.2f} / {skew[name][1]:.2f}", "; ".join(motions(plan)) or "none"]
        for name, plan in plans.items()
    ]
    plan_table = Table(
        "Each packed table's label skew (the segments' total-variation distance from the "
        "table's label mix: largest / image-weighted mean) and the motions in its packing "
        "statement's plan (EXPLAIN, Greenplum's planner).",
        ["pack", "label skew", "motions"],
        plan_rows,
    )
    return Outcome(
        [table, plan_table],
        [],
        {
            "seconds": times,
            "moved": moved,
            "images": images,
            "row_bytes": row_bytes,
            "plans": plans,
            "label_skew": skew,
        },
    )


BENCHMARK = Benchmark(
    name="layouts",
    title="Packing on Greenplum: IID against `distribute_by`",
    question=(
        "What does packing a table cost on Greenplum, in seconds and in rows moved between "
        "segments, when it deals the rows IID and when it keeps each value of a column on one "
        "segment (`distribute_by`), against copying the rows where they lie or rehashing them?"
    ),
    method=(
        "The 60,000 Fashion-MNIST training images as one row each (`id bigint, img smallint[], "
        "label integer`, as the loading benchmark builds them) with a `site` column (16 sites, "
        "each label drawn mostly from a few: a Dirichlet(0.5) mix of sites per label), the "
        "table `DISTRIBUTED BY (site)`. Interleaved in each round, a CHECKPOINT before each: "
        "two copies by `CREATE TABLE AS` (the floors: rows kept on their segment, and rows "
        "rehashed by id), and `pack_table` IID and with `distribute_by='site'`, K = the "
        "cluster's primaries. After the rounds: how many rows each result holds on another "
        "segment than its source row, and the motions in each packing statement's plan."
    ),
    defaults={"rounds": 3, "seed": 0},
    quick={"rounds": 1},
    run=run,
)
