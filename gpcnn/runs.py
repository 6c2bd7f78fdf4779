"""Runs in the database: every ``fit`` and the weights and metrics of each of its iterations.

An iteration's row is written in one transaction as the iteration ends, so an interrupted run can be
resumed from its last stored iteration (``fit(table, resume=run_id)``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import sqlalchemy as sa

from . import __version__
from .engines import Backend


@dataclass
class StoredRun:
    run_id: int
    table: str
    iterations: list[dict]  # history rows, in order
    weights: bytes | None  # the model of the last stored iteration
    rule_state: bytes | None  # what the merge rule needs beyond it (BMUF's momentum)
    optimizer: bytes | None  # the shared optimizer state ("average" policy)
    segment_models: dict[int, tuple[bytes, bytes | None]]  # each key's next start


def ensure_tables(conn: sa.Connection, backend: Backend) -> None:
    s = backend.qschema
    conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
    conn.exec_driver_sql(
        f"""CREATE TABLE IF NOT EXISTS {s}.runs (
            run_id bigserial PRIMARY KEY,
            table_name text NOT NULL,
            params text NOT NULL,
            model_json text NOT NULL,
            gpcnn_version text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        ){backend.distribution("run_id")}"""
    )
    conn.exec_driver_sql(
        f"""CREATE TABLE IF NOT EXISTS {s}.run_iterations (
            run_id bigint NOT NULL,
            iteration integer NOT NULL,
            metrics text NOT NULL,
            weights bytea NOT NULL,
            rule_state bytea,
            optimizer bytea,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (run_id, iteration)
        ){backend.distribution("run_id")}"""
    )
    # Per-segment models (EASGD's local models, K workers that never merge), joined by key in
    # the training query: distributed/partitioned like image tables, so no motion on Greenplum.
    conn.exec_driver_sql(
        f"""CREATE TABLE IF NOT EXISTS {s}.segment_models (
            run_id bigint NOT NULL,
            __dist_key__ integer NOT NULL,
            iteration integer NOT NULL,
            weights bytea NOT NULL,
            optimizer bytea,
            PRIMARY KEY (run_id, __dist_key__)
        ){backend.distribution("__dist_key__")}"""
    )


def create_run(
    engine: sa.Engine, backend: Backend, table: str, params: dict, model_json: str
) -> int:
    with engine.begin() as conn:
        ensure_tables(conn, backend)
        return conn.execute(
            sa.text(
                f"INSERT INTO {backend.qschema}.runs (table_name, params, model_json, gpcnn_version) "
                "VALUES (:t, :p, :m, :v) RETURNING run_id"
            ),
            {"t": table, "p": json.dumps(params), "m": model_json, "v": __version__},
        ).scalar()


def write_iteration(
    conn: sa.Connection,
    backend: Backend,
    run_id: int,
    row: dict,
    weights: bytes,
    rule_state: bytes | None = None,
    optimizer: bytes | None = None,
) -> None:
    """The iteration's history row and model; the caller's transaction also holds the rest."""
    conn.execute(
        sa.text(
            f"INSERT INTO {backend.qschema}.run_iterations (run_id, iteration, metrics, weights, "
            "rule_state, optimizer) VALUES (:r, :i, :m, :w, :s, :o)"
        ),
        {
            "r": run_id,
            "i": row["iteration"],
            "m": json.dumps(row),
            "w": weights,
            "s": rule_state,
            "o": optimizer,
        },
    )


def write_segment_models(
    conn: sa.Connection,
    backend: Backend,
    run_id: int,
    iteration: int,
    starts: dict[int, tuple[bytes, bytes | None]],
) -> None:
    """Each key's model and optimizer state to start the next iteration from."""
    s = backend.qschema
    conn.execute(sa.text(f"DELETE FROM {s}.segment_models WHERE run_id = :r"), {"r": run_id})
    conn.execute(
        sa.text(
            f"INSERT INTO {s}.segment_models (run_id, __dist_key__, iteration, weights, optimizer) "
            "VALUES (:r, :k, :i, :w, :o)"
        ),
        [{"r": run_id, "k": key, "i": iteration, "w": w, "o": o} for key, (w, o) in starts.items()],
    )


def load_run(engine: sa.Engine, backend: Backend, run_id: int) -> StoredRun:
    s = backend.qschema
    with engine.begin() as conn:
        ensure_tables(conn, backend)
        run = conn.execute(
            sa.text(f"SELECT table_name FROM {s}.runs WHERE run_id = :r"),
            {"r": run_id},
        ).first()
        if run is None:
            raise ValueError(f"no run {run_id} in {backend.schema}.runs")
        rows = conn.execute(
            sa.text(
                f"SELECT iteration, metrics FROM {s}.run_iterations WHERE run_id = :r "
                "ORDER BY iteration"
            ),
            {"r": run_id},
        ).all()
        last = None
        if rows:
            last = conn.execute(
                sa.text(
                    f"SELECT weights, rule_state, optimizer FROM {s}.run_iterations "
                    "WHERE run_id = :r AND iteration = :i"
                ),
                {"r": run_id, "i": rows[-1].iteration},
            ).first()
        segment_models = conn.execute(
            sa.text(
                f"SELECT __dist_key__, weights, optimizer FROM {s}.segment_models WHERE run_id = :r"
            ),
            {"r": run_id},
        ).all()
    return StoredRun(
        run_id=run_id,
        table=run.table_name,
        iterations=[json.loads(r.metrics) for r in rows],
        weights=_bytes(last.weights) if last else None,
        rule_state=_bytes(last.rule_state) if last else None,
        optimizer=_bytes(last.optimizer) if last else None,
        segment_models={k: (bytes(w), _bytes(o)) for k, w, o in segment_models},
    )


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)


def find_unfinished(engine: sa.Engine, schema: str, table: str, estimator) -> int | None:
    """The newest run of this table with the same parameters that stopped before its last
    iteration, to resume it (None if there is none)."""
    from .engines import backend_for
    from .tables import TableName, describe

    backend = backend_for(engine, schema)
    name = str(describe(engine, TableName.parse(table), schema).table)
    with engine.begin() as conn:
        ensure_tables(conn, backend)
        row = conn.execute(
            sa.text(
                f"SELECT r.run_id, count(i.iteration) AS done FROM {backend.qschema}.runs r "
                f"LEFT JOIN {backend.qschema}.run_iterations i USING (run_id) "
                "WHERE r.table_name = :t AND r.params = :p "
                "GROUP BY r.run_id ORDER BY r.run_id DESC LIMIT 1"
            ),
            {"t": name, "p": json.dumps(estimator._stored_params())},
        ).first()
    if row is None or row.done == 0 or row.done >= estimator.iterations:
        return None
    return row.run_id
