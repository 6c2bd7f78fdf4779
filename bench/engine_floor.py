"""How much of Greenplum's extra iteration cost is its statement's bare data movement (issue 25,
item 3: an iteration on Greenplum within 1.5x of the embedded PostgreSQL at 1M and 25M, K = 2).

    .venv/bin/python bench/engine_floor.py postgresql://gpadmin@127.0.0.1:7000/gpcnn \
        [--sizes 1 25] [--rounds 5] [--out bench/results/engine-floor.json]

A steady iteration's training must bring the start (the stored model) into each of the K segment
processes, through PL/Python, and bring what they trained back to the client. Here that movement
runs alone, with no training and no gpcnn code in the path (the stored model passes through a
PL/Python function that returns its argument), on each engine:

- ``postgresql``: K sessions at once, each reading the stored model where it lies (shared
  buffers or the OS's cache) and sending it to this client (``bench/floor.py``'s ``read_send``): gpcnn's
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

Also timed: the model's logged binary ``COPY`` into a table like ``checkpoints`` (PostgreSQL; on
Greenplum into one primary, and into every primary as a replicated start would need). Each
round also runs ``bench/overhead.py``'s steady iteration on both engines (its fixed cost, as
``bench/merge_place.py`` does), so the bare walls and the shipped fixed costs come from one
interleaved run; the order within a round turns with the round. The report's extras are each
Greenplum part's wall minus PostgreSQL's, paired by round: what Greenplum's statement adds to
PostgreSQL's iteration whatever gpcnn does around it. Greenplum is within 1.5x only if all it
adds is at most half of PostgreSQL's fixed cost (the ``allowed_extra``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import overhead
from floor import copy_in, send_to_client

import gpcnn
from gpcnn.engines import copying

SCHEMA = "gpcnn_engine_floor"
K = 2
# Rows per key in ``keys``, of which a volatile filter keeps the first. Greenplum's planner costs
# a motion by its rows: with K key rows (or a filter it can estimate) it sends the keys to the
# stored model instead of the model to them. Together with the LEFT JOIN and the motion cost set
# in ``sessions`` this gave the broadcast plan at both sizes; which of the three it needs alone
# was not tried (the plan is checked before any timing).
ROWS_PER_KEY = 4096
VARIANTS = ("stored start", "replicated start", "replicated start, one vector out")


def sessions(db, count: int) -> list:
    """``count`` connections set up as gpcnn's segment sessions are (on Greenplum: 64 KB
    interconnect packets, deeper queues), in transactions (``commit`` after each statement). On
    Greenplum also ``gp_motion_cost_per_row``, which gpcnn does not set: rows moved cost more
    than rows joined, so the planner broadcasts the model's few rows to the keys' segments."""
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
        vector = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
        overhead.keras.backend.clear_session()
        self.model_bytes = vector.nbytes
        self.sessions = sessions(db, K if not self.greenplum else 1)
        self.payload = b"".join(
            copying.chunk_rows(("integer",), [((1,), vector)], db.backend.chunk_values)
        )
        tables = {"stored": db.backend.distribution("run")}
        if self.greenplum:
            tables["everywhere"] = db.backend.replicated()
        self.written = [f"{table}_written" for table in tables]
        with db.engine.begin() as conn:
            schema = db.backend.quote(SCHEMA)
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
            conn.exec_driver_sql(
                f"CREATE FUNCTION {self.name('through_python')}(data bytea, keep boolean) "
                "RETURNS bytea STRICT LANGUAGE plpython3u AS 'return data if keep else None'"
            )
            if self.greenplum:
                self._keys(conn)
            # each table read, and one like it that ``write`` times
            for table, distribution in tables.items():
                for name in (table, f"{table}_written"):
                    conn.exec_driver_sql(
                        f"CREATE TABLE {self.name(name)} (run integer, chunk integer, "
                        f"data bytea){distribution}"
                    )
                    conn.exec_driver_sql(
                        f"ALTER TABLE {self.name(name)} ALTER data SET STORAGE EXTERNAL"
                    )
        for table in tables:
            self.write(table)
        with self.sessions[0].cursor() as cur:
            cur.execute(f"ANALYZE {self.name('stored')}")
        self.sessions[0].commit()

    def name(self, name: str) -> str:
        """A table or function of the benchmark's schema, quoted."""
        quote = self.db.backend.quote
        return f"{quote(SCHEMA)}.{quote(name)}"

    def _keys(self, conn) -> None:
        """``keys``: K keys, one on each primary as gpcnn chooses them, each with its shard rank
        and ``ROWS_PER_KEY`` rows numbered by ``copy_no``."""
        keys = self.db.backend.choose_keys(conn, K)
        conn.exec_driver_sql(
            f"CREATE TABLE {self.name('keys')} (key integer, rank integer, copy_no integer)"
            f"{self.db.backend.distribution('key')}"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {self.name('keys')} SELECT k.key, k.rank, n FROM "
            "unnest(%s, %s) AS k(key, rank), generate_series(0, %s) AS n",
            (list(keys), list(range(K)), ROWS_PER_KEY - 1),
        )
        conn.exec_driver_sql(f"ANALYZE {self.name('keys')}")

    def write(self, table: str) -> float:
        """Wall seconds of one logged binary COPY of the model into ``table`` (emptied first,
        untimed), 1 MiB at a time, and its commit: how a checkpoint is stored."""
        conn = self.sessions[0]
        with conn.cursor() as cur:
            cur.execute(f"TRUNCATE {self.name(table)}")
        conn.commit()
        started = time.perf_counter()
        copy_in(conn, self.name(table), "run, chunk, data", self.payload)
        return time.perf_counter() - started

    def check_plan(self, variant: str) -> str:
        """The Greenplum plan of ``variant`` (EXPLAIN), refused unless it is the one meant: one
        Gather Motion, at the root (so the join and the PL/Python calls run on the segments),
        and a Broadcast Motion of the model for the stored start only."""
        with self.sessions[0].cursor() as cur:
            cur.execute(f"EXPLAIN {self._greenplum_sql(variant)}")
            plan = "\n".join(line for (line,) in cur.fetchall())
        self.sessions[0].commit()
        meant = (
            plan.startswith(f"Gather Motion {K}:1")
            and plan.count("Gather Motion") == 1
            and "Redistribute" not in plan
            and ("Broadcast Motion" in plan) == (variant == "stored start")
        )
        if not meant:
            raise RuntimeError(f"{variant}: not the plan meant\n{plan}")
        return plan

    def _greenplum_sql(self, variant: str) -> str:
        """Each key's first row joined to the model's chunks, which it scans once (a LEFT JOIN:
        the keys' side stays where it is)."""
        table = "stored" if variant == "stored start" else "everywhere"
        keep = f"c.chunk % {K} = k.rank" if variant.endswith("one vector out") else "true"
        return (
            f"SELECT k.key, c.chunk, {self.name('through_python')}(c.data, {keep}) "
            f"FROM (SELECT * FROM {self.name('keys')} WHERE copy_no < 1 + 0 * random()) k "
            f"LEFT JOIN {self.name(table)} c ON c.run = 1"
        )

    def read_send(self, variant: str) -> tuple[float, int]:
        """Wall seconds of one reading of the model by K segment processes, and the bytes that
        reached this client (refused if less than the model's bytes per vector sent)."""
        if self.greenplum:
            queries = [self._greenplum_sql(variant)]
        else:
            queries = [
                f"SELECT {self.name('through_python')}(data, true) FROM {self.name('stored')} "
                "WHERE run = 1"
            ] * K
        started = time.perf_counter()
        received = sum(send_to_client(self.sessions, queries))
        seconds = time.perf_counter() - started
        vectors = 1 if variant.endswith("one vector out") else K
        if received < vectors * self.model_bytes:
            raise RuntimeError(f"{variant or 'postgresql'}: {received} bytes reached the client")
        return seconds, received

    def close(self) -> None:
        """The sessions closed and the schema dropped."""
        for conn in self.sessions:
            conn.close()
        with self.db.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {self.db.backend.quote(SCHEMA)} CASCADE")


def one_round(stores: dict, handles: dict, tables: dict, million: float, round_: int) -> dict:
    """Every part once: the reads, the writes and the shipped fits. The order turns with the
    round (odd rounds run the engines the other way round and the Greenplum reads in reverse),
    so no part always follows the same one."""
    turn = -1 if round_ % 2 else 1
    engines = list(handles)[::turn]
    took = {}
    for name in engines:
        variants = [""] if name == "postgresql" else list(VARIANTS[::turn])
        for variant in variants:
            label = f"greenplum, {variant}" if variant else name
            took[label] = stores[name].read_send(variant)
    for name in engines:
        for table in stores[name].written:
            took[f"{name} write {table}"] = (stores[name].write(table), len(stores[name].payload))
    for name in engines:
        got: dict = defaultdict(list)
        overhead._one_fit(handles[name], tables[name], million, K, got)
        took[f"{name} shipped fixed"] = (got["fixed"][-1], 0)
    return took


def measure(greenplum_url: str, sizes: list[float], rounds: int) -> dict:
    handles = {"postgresql": gpcnn.connect(None), "greenplum": gpcnn.connect(greenplum_url)}
    tables = {}
    for name, db in handles.items():
        gpcnn.install(db)
        overhead.SCHEMA = f"gpcnn_bench_floor_{name}"
        tables[name] = overhead.table_for(db, K)
    walls: dict = defaultdict(list)
    plans = {}
    for million in sizes:
        stores = {name: Stored(db, million) for name, db in handles.items()}
        try:
            plans[million] = {v: stores["greenplum"].check_plan(v) for v in VARIANTS}
            for round_ in range(-1, rounds):  # round -1 warms up: PL/Python, TOAST pages
                took = one_round(stores, handles, tables, million, round_)
                if round_ < 0:
                    continue
                for name, (seconds, _) in took.items():
                    walls[(million, name)].append(seconds)
                print(
                    f"round {round_ + 1} {million:g}M: "
                    + ", ".join(f"{n} {s:.3f} s ({b / 1e6:.1f} MB)" for n, (s, b) in took.items()),
                    flush=True,
                )
        finally:
            for store in stores.values():
                store.close()
    return summary(sizes, rounds, walls, plans)


def paired(walls: dict, million: float, minuend: str, subtrahend: str) -> dict:
    """Round by round, ``minuend``'s wall minus ``subtrahend``'s (the rounds are interleaved, so
    each pair shared the machine's state): the differences, their median, least and most."""
    diffs = [
        a - b for a, b in zip(walls[(million, minuend)], walls[(million, subtrahend)], strict=True)
    ]
    return {
        "rounds": diffs,
        "median": statistics.median(diffs),
        "min": min(diffs),
        "max": max(diffs),
    }


def summary(sizes, rounds, walls, plans) -> dict:
    """Per size: the walls and their medians; each Greenplum read's and write's extra over
    PostgreSQL's, paired by round; and the allowance for 1.5x (half PostgreSQL's fixed cost)."""
    rows = []
    for million in sizes:
        mine = {name: v for (m, name), v in walls.items() if m == million}
        pg_fixed = statistics.median(mine["postgresql shipped fixed"])
        pg_write = "postgresql write stored_written"
        rows.append(
            {
                "million": million,
                "rounds": rounds,
                "walls": mine,
                "medians": {name: statistics.median(v) for name, v in mine.items()},
                "read_extra": {
                    v: paired(walls, million, f"greenplum, {v}", "postgresql") for v in VARIANTS
                },
                "write_extra": {
                    "one primary": paired(
                        walls, million, "greenplum write stored_written", pg_write
                    ),
                    "every primary": paired(
                        walls, million, "greenplum write everywhere_written", pg_write
                    ),
                },
                "shipped_extra": paired(
                    walls, million, "greenplum shipped fixed", "postgresql shipped fixed"
                ),
                "allowed_extra": 0.5 * pg_fixed,
                "shipped_ratio": statistics.median(mine["greenplum shipped fixed"]) / pg_fixed,
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

        def ms(extra: dict) -> str:
            return f"{extra['median'] * 1e3:+.0f} ms ({extra['min'] * 1e3:+.0f} to {extra['max'] * 1e3:+.0f})"

        reads = ", ".join(f"{v} {ms(e)}" for v, e in row["read_extra"].items())
        writes = ", ".join(f"{v} {ms(e)}" for v, e in row["write_extra"].items())
        medians = row["medians"]
        print(
            f"{row['million']:g}M, paired by round: Greenplum's extra over PostgreSQL's read "
            f"{reads}; write {writes}; shipped fixed cost {ms(row['shipped_extra'])}; allowed "
            f"for 1.5x: {row['allowed_extra'] * 1e3:.0f} ms; shipped fixed medians "
            f"{medians['greenplum shipped fixed']:.3f} s against "
            f"{medians['postgresql shipped fixed']:.3f} s, {row['shipped_ratio']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
