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
    params: dict
    model_json: str
    iterations: list[dict]  # history rows, in order
    weights: bytes | None  # of the last stored iteration
    segment_state: dict[int, bytes]  # per-segment models of rules that keep them


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


def store_iteration(
    engine: sa.Engine,
    backend: Backend,
    run_id: int,
    row: dict,
    weights: bytes,
    segment_models: dict[int, bytes] | None = None,
) -> None:
    """The iteration's history row and weights (and per-segment models), in one transaction."""
    s = backend.qschema
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO {s}.run_iterations (run_id, iteration, metrics, weights) "
                "VALUES (:r, :i, :m, :w)"
            ),
            {"r": run_id, "i": row["iteration"], "m": json.dumps(row), "w": weights},
        )
        if segment_models is not None:
            conn.execute(
                sa.text(f"DELETE FROM {s}.segment_models WHERE run_id = :r"), {"r": run_id}
            )
            conn.execute(
                sa.text(
                    f"INSERT INTO {s}.segment_models (run_id, __dist_key__, iteration, weights) "
                    "VALUES (:r, :k, :i, :w)"
                ),
                [
                    {"r": run_id, "k": key, "i": row["iteration"], "w": w}
                    for key, w in segment_models.items()
                ],
            )


def load_run(engine: sa.Engine, backend: Backend, run_id: int) -> StoredRun:
    s = backend.qschema
    with engine.begin() as conn:
        ensure_tables(conn, backend)
        run = conn.execute(
            sa.text(f"SELECT table_name, params, model_json FROM {s}.runs WHERE run_id = :r"),
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
        weights = None
        if rows:
            weights = conn.execute(
                sa.text(
                    f"SELECT weights FROM {s}.run_iterations WHERE run_id = :r AND iteration = :i"
                ),
                {"r": run_id, "i": rows[-1].iteration},
            ).scalar()
        segment_state = dict(
            conn.execute(
                sa.text(f"SELECT __dist_key__, weights FROM {s}.segment_models WHERE run_id = :r"),
                {"r": run_id},
            ).all()
        )
    return StoredRun(
        run_id=run_id,
        table=run.table_name,
        params=json.loads(run.params),
        model_json=run.model_json,
        iterations=[json.loads(r.metrics) for r in rows],
        weights=None if weights is None else bytes(weights),
        segment_state={k: bytes(v) for k, v in segment_state.items()},
    )
