"""How much of Greenplum's extra iteration cost is its statement's bare data movement (issue 25,
item 3: an iteration on Greenplum within 1.5x of the embedded PostgreSQL at 1M and 25M, K = 2).

    .venv/bin/python bench/engine_floor.py postgresql://gpadmin@127.0.0.1:7000/gpcnn \
        [--sizes 1 25] [--rounds 5] [--out bench/results/engine-floor.json]

A steady iteration's training must bring the start (the stored model) into each of the K segment
processes, through PL/Python, and bring what they trained back to the client. Here that movement
runs alone, with no training and no gpcnn code in the path (the stored model passes through a
PL/Python function that returns its argument), on each engine:

- ``postgresql``: K sessions at once, each reading the stored model where it lies (shared
  buffers) and sending it to this client (``bench/floor.py``'s ``read_send``): gpcnn's
  ``dispatch="sessions"``.
- ``greenplum, stored start``: one statement; the model, stored on the primary its row hashes to
  (as gpcnn's ``checkpoints``), reaches the segment of each of the K keys (a key per primary, as
  gpcnn chooses them), passes through PL/Python there, and each key's copy comes to this client
  through the coordinator: what the shipped statement's broadcast and gather carry.
- ``greenplum, replicated start``: the same with a copy of the model on every primary, read
  where it lies (no broadcast; what ``DISTRIBUTED REPLICATED`` checkpoints would give).
- ``greenplum, replicated start, one vector out``: as above, but each key sends only its share of
  the chunks (chunk % K), so one vector's bytes reach the client: less than any plan can move,
  since the client needs at least the merged model and a merge in the database first moves the
  K vectors between the segments.

Each round also runs ``bench/overhead.py``'s steady iteration on both engines (its fixed cost,
as ``bench/merge_place.py`` does), so the bare walls and the shipped fixed costs come from one
interleaved run. The report's ``extra`` is each Greenplum variant's bare wall minus
PostgreSQL's: what Greenplum's statement must add to PostgreSQL's iteration whatever gpcnn does
around it. Greenplum is within 1.5x only if its extra is at most half of PostgreSQL's fixed
cost; where the least extra of all variants is more, no statement of this shape can meet it
on this cluster.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import overhead
from floor import _Drain

import gpcnn
from gpcnn.engines import transport

SCHEMA = "gpcnn_engine_floor"
K = 2
CHUNK_VALUES = (1 << 20) // 4
# Rows per key in ``keys``, of which a volatile filter keeps the first: Greenplum's planner costs
# a motion by its rows, so with few keys it would move them to the stored model instead of the
# model to them; it estimates a third of these pass the filter.
ROWS_PER_KEY = 4096
THROUGH_PYTHON = (
    "CREATE FUNCTION {schema}.through_python(data bytea, keep boolean) RETURNS bytea "
    "STRICT LANGUAGE plpython3u AS 'return data if keep else None'"
)


def sessions(db, count: int) -> list:
    """``count`` connections set up as gpcnn's segment sessions are (on Greenplum: 64 KB
    interconnect packets, deeper queues), in transactions (``commit`` after each statement)."""
    backend = db.backend
    args, params = db.engine.dialect.create_connect_args(db.engine.url)
    if backend.session_options:
        params["options"] = f"{params.get('options', '')} {backend.session_options}".strip()
    connections = [db.engine.dialect.dbapi.connect(*args, **params) for _ in range(count)]
    for conn in connections:
        with conn.cursor() as cur:
            for statement in backend.session_settings:
                cur.execute(statement)
            if backend.kind == "greenplum":
                # rows moved cost more than rows joined: the planner broadcasts the model's few
                # rows to the keys' segments rather than send the keys to the model's
                cur.execute("SET gp_motion_cost_per_row = 1000")
        conn.commit()
    return connections


class Stored:
    """A model stored in chunk rows on one server (in ``stored``; on Greenplum also in
    ``everywhere``, replicated), the sessions that read it, and a table like each that
    ``write`` stores it into."""

    def __init__(self, db, million: float) -> None:
        self.db, self.greenplum = db, db.backend.kind == "greenplum"
        model = overhead.dense_model(million)
        self.vector = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
        overhead.keras.backend.clear_session()
        self.schema = db.backend.quote(SCHEMA)
        self.sessions = sessions(db, K if not self.greenplum else 1)
        payload = b"".join(transport.chunk_rows(("integer",), [((1,), self.vector)], CHUNK_VALUES))
        with db.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            conn.exec_driver_sql(f"CREATE SCHEMA {self.schema}")
            conn.exec_driver_sql(THROUGH_PYTHON.format(schema=self.schema))
            tables = {"stored": db.backend.distribution("run")}
            if self.greenplum:
                tables["everywhere"] = db.backend.replicated()
                keys = db.backend.choose_keys(conn, K)
                conn.exec_driver_sql(
                    f"CREATE TABLE {self.schema}.keys (key integer, rank integer, row integer)"
                    f"{db.backend.distribution('key')}"
                )
                conn.exec_driver_sql(
                    f"INSERT INTO {self.schema}.keys SELECT k.key, k.rank, r FROM "
                    "unnest(%s, %s) AS k(key, rank), generate_series(0, %s) AS r",
                    (list(keys), list(range(K)), ROWS_PER_KEY - 1),
                )
                conn.exec_driver_sql(f"ANALYZE {self.schema}.keys")
            # each table read, and one like it that ``write`` times
            for table, distribution in tables.items():
                for name in (table, f"{table}_written"):
                    conn.exec_driver_sql(
                        f"CREATE TABLE {self.schema}.{name} (run integer, chunk integer, "
                        f"data bytea){distribution}"
                    )
                    conn.exec_driver_sql(
                        f"ALTER TABLE {self.schema}.{name} ALTER data SET STORAGE EXTERNAL"
                    )
        self.payload, self.written = payload, [f"{table}_written" for table in tables]
        for table in tables:
            self.write(table)
        with self.sessions[0].cursor() as cur:
            cur.execute(f"ANALYZE {self.schema}.stored")
        self.sessions[0].commit()

    def write(self, table: str) -> float:
        """Wall seconds of one logged binary COPY of the model into ``table`` (emptied first,
        untimed), 1 MiB at a time, and its commit: how a checkpoint is stored."""
        conn = self.sessions[0]
        with conn.cursor() as cur:
            cur.execute(f"TRUNCATE {self.schema}.{table}")
        conn.commit()
        started = time.perf_counter()
        with conn.cursor() as cur:
            cur.copy_expert(
                f"COPY {self.schema}.{table} (run, chunk, data) FROM STDIN (FORMAT binary)",
                io.BytesIO(self.payload),
                size=1 << 20,
            )
        conn.commit()
        return time.perf_counter() - started

    def plan(self, variant: str) -> str:
        """The Greenplum plan of ``variant`` (EXPLAIN), to check where the PL/Python calls run."""
        with self.sessions[0].cursor() as cur:
            cur.execute(f"EXPLAIN {self._greenplum_sql(variant)}")
            lines = [line for (line,) in cur.fetchall()]
        self.sessions[0].commit()
        return "\n".join(lines)

    def _greenplum_sql(self, variant: str) -> str:
        """Each key's first row joined to the model's chunks, which it scans once (a LEFT JOIN:
        the keys' side stays where it is)."""
        table = "stored" if variant == "stored start" else "everywhere"
        keep = f"c.chunk % {K} = k.rank" if variant.endswith("one vector out") else "true"
        return (
            f"SELECT k.key, c.chunk, {self.schema}.through_python(c.data, {keep}) "
            f"FROM (SELECT * FROM {self.schema}.keys WHERE row < 1 + 0 * random()) k "
            f"LEFT JOIN {self.schema}.{table} c ON c.run = 1"
        )

    def read_send(self, variant: str) -> tuple[float, int]:
        """Wall seconds of one reading of the model by K segment processes, and the bytes that
        reached this client."""
        if self.greenplum:
            queries = [self._greenplum_sql(variant)]
        else:
            queries = [
                f"SELECT {self.schema}.through_python(data, true) FROM {self.schema}.stored "
                "WHERE run = 1 ORDER BY chunk"
            ] * K
        drains = [_Drain() for _ in queries]

        def drain(conn, query: str, into: _Drain) -> None:
            with conn.cursor() as cur:
                cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT binary)", into)
            conn.commit()

        threads = [
            threading.Thread(target=drain, args=args)
            for args in zip(self.sessions, queries, drains, strict=True)
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started, sum(d.bytes for d in drains)

    def close(self) -> None:
        for conn in self.sessions:
            conn.close()
        with self.db.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {self.schema} CASCADE")


VARIANTS = ("stored start", "replicated start", "replicated start, one vector out")


def measure(greenplum_url: str, sizes: list[float], rounds: int) -> dict:
    handles = {"postgresql": gpcnn.connect(None), "greenplum": gpcnn.connect(greenplum_url)}
    tables = {}
    for name, db in handles.items():
        gpcnn.install(db)
        overhead.SCHEMA = f"gpcnn_bench_floor_{name}"
        tables[name] = overhead.table_for(db, K)
    bare, fixed = defaultdict(list), defaultdict(list)
    plans = {}
    for million in sizes:
        stores = {name: Stored(db, million) for name, db in handles.items()}
        plans[million] = {v: stores["greenplum"].plan(v) for v in VARIANTS}
        for variant, plan in plans[million].items():
            if ("Broadcast Motion" in plan) != (
                variant == "stored start"
            ) or "Redistribute" in plan:
                raise RuntimeError(f"{variant}: not the plan meant\n{plan}")
        try:
            for round_ in range(-1, rounds):  # round -1 warms up: PL/Python, TOAST pages
                took = {"postgresql": stores["postgresql"].read_send("")}
                for variant in VARIANTS:
                    took[f"greenplum, {variant}"] = stores["greenplum"].read_send(variant)
                for name, store in stores.items():
                    for table in store.written:
                        took[f"{name} write {table}"] = (store.write(table), len(store.payload))
                for name, db in handles.items():
                    got: dict = defaultdict(list)
                    overhead._one_fit(db, tables[name], million, K, got)
                    took[f"{name} shipped fixed"] = (got["fixed"][-1], 0)
                if round_ < 0:
                    continue
                for name, (seconds, _) in took.items():
                    (fixed if name.endswith("fixed") else bare)[(million, name)].append(seconds)
                print(
                    f"round {round_ + 1} {million:g}M: "
                    + ", ".join(f"{n} {s:.3f} s ({b / 1e6:.1f} MB)" for n, (s, b) in took.items()),
                    flush=True,
                )
        finally:
            for store in stores.values():
                store.close()
    return summary(sizes, rounds, bare, fixed, plans)


def summary(sizes, rounds, bare, fixed, plans) -> dict:
    """Per size: the medians, each Greenplum read's extra over PostgreSQL's, each Greenplum
    write's extra over PostgreSQL's, and the allowance (half PostgreSQL's fixed cost)."""
    rows = []
    for million in sizes:
        median = {name: statistics.median(v) for (m, name), v in bare.items() if m == million}
        median.update(
            {name: statistics.median(v) for (m, name), v in fixed.items() if m == million}
        )
        pg_fixed = median["postgresql shipped fixed"]
        pg_write = median["postgresql write stored_written"]
        rows.append(
            {
                "million": million,
                "rounds": rounds,
                "walls": {name: v for (m, name), v in {**bare, **fixed}.items() if m == million},
                "medians": median,
                "read_extra": {
                    v: median[f"greenplum, {v}"] - median["postgresql"] for v in VARIANTS
                },
                "write_extra": {
                    "one primary": median["greenplum write stored_written"] - pg_write,
                    "every primary": median["greenplum write everywhere_written"] - pg_write,
                },
                "allowed_extra": 0.5 * pg_fixed,
                "shipped_ratio": median["greenplum shipped fixed"] / pg_fixed,
                "plans": plans[million],
            }
        )
    return {"segments": K, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("greenplum", help="the Greenplum URL (a cluster on this machine)")
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 25])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/engine-floor.json"))
    args = parser.parse_args(argv)
    report = measure(args.greenplum, args.sizes, args.rounds)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for row in report["rows"]:
        reads = ", ".join(f"{v} {s * 1e3:+.0f} ms" for v, s in row["read_extra"].items())
        writes = ", ".join(f"{v} {s * 1e3:+.0f} ms" for v, s in row["write_extra"].items())
        medians = row["medians"]
        print(
            f"{row['million']:g}M: Greenplum's extra over PostgreSQL's read {reads}; write "
            f"{writes}; allowed for 1.5x: {row['allowed_extra'] * 1e3:.0f} ms; shipped fixed "
            f"{medians['greenplum shipped fixed']:.3f} s against "
            f"{medians['postgresql shipped fixed']:.3f} s, {row['shipped_ratio']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
