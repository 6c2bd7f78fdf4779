"""Runs in the database: every ``fit``, its status, and the weights and metrics of each iteration.

An iteration's row is written in one transaction as the iteration ends, so an interrupted run can be
resumed from its last stored iteration (``fit(table, resume=run_id)``). A run is ``running`` until it
ends ``finished``, ``stopped_early`` (on purpose: never resumed by itself) or ``failed`` (with the
error; resumable). ``find_unfinished`` matches runs on the parameters that change the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpcnn.engines import Database, catalog, connect
from gpcnn.kernel import wire


@dataclass
class StoredRun:
    run_id: int
    table: str
    status: str
    iterations: list[dict]  # history rows, in order
    weights: bytes | None  # the model of the last stored iteration
    rule_state: bytes | None  # what the merge rule needs beyond it (BMUF's momentum)
    optimizer: bytes | None  # the shared optimizer state ("average" policy)
    segment_models: dict[int, tuple[bytes, bytes | None]]  # each key's next start


def create_run(db: Database, table: str, params: dict, model_json: str) -> int:
    with db.begin() as conn:
        catalog.ensure_tables(conn, db.backend)
        return catalog.insert_run(conn, db.backend, table, params, catalog.result_key(params), model_json)


def set_status(db: Database, run_id: int, status: str, error: str | None = None) -> None:
    with db.begin() as conn:
        catalog.set_run_status(conn, db.backend, run_id, status, error)


def load_run(db: Database, run_id: int) -> StoredRun:
    backend = db.backend
    with db.begin() as conn:
        catalog.ensure_tables(conn, backend)
        run = catalog.run_row(conn, backend, run_id)
        if run is None:
            raise ValueError(f"no run {run_id} in {db.schema}.runs")
        metrics = [json.loads(m) for m in catalog.iteration_metrics(conn, backend, run_id)]
        last = catalog.last_checkpoint(conn, backend, run_id)
        segments = catalog.segment_models(conn, backend, run_id)
    iteration, parts = last if last is not None else (0, {})
    return StoredRun(
        run_id=run_id,
        table=run.table_name,
        status=run.status,
        iterations=[m for m in metrics if m["iteration"] <= iteration],
        weights=_bytes(parts.get("weights")),
        rule_state=_bytes(parts.get("rule_state")),
        optimizer=_bytes(parts.get("optimizer")),
        segment_models={k: (wire.to_bytes(w), _bytes(o)) for k, (w, o) in segments.items()},
    )


def _bytes(vector) -> bytes | None:
    return None if vector is None else wire.to_bytes(vector)


def find_unfinished(db: Database | str | None, table: str, params: dict) -> int | None:
    """The newest resumable run of this table whose result-changing parameters equal ``params``
    (an estimator's ``stored_params()``) and that stored fewer iterations than asked for; None if
    there is none."""
    from gpcnn.data.tables import describe

    db = connect(db)
    name = str(describe(db, table).table)
    with db.begin() as conn:
        catalog.ensure_tables(conn, db.backend)
        found = catalog.newest_resumable(conn, db.backend, name, catalog.result_key(params))
    if found is None or found[1] == 0 or found[1] >= int(params["iterations"]):
        return None
    return found[0]


# -- lifecycle ----------------------------------------------------------------------------------


def list_runs(db: Database | str | None = None, run_ids=None) -> list[dict]:
    """One dict per run: id, table, status, error, iterations stored, bytes stored, times."""
    db = connect(db)
    with db.begin() as conn:
        catalog.ensure_tables(conn, db.backend)
        rows = catalog.run_summaries(conn, db.backend, run_ids)
    return [
        {
            "run_id": r.run_id,
            "table": r.table_name,
            "status": r.status,
            "error": r.error,
            "merge": json.loads(r.params).get("merge"),
            "iterations": int(r.iterations),
            "checkpoints": int(r.checkpoints),
            "stored_bytes": int(r.stored_bytes),
            "created_at": r.created_at.isoformat(),
            "updated_at": None if r.updated_at is None else r.updated_at.isoformat(),
        }
        for r in rows
    ]


def show_run(db: Database | str | None, run_id: int) -> dict:
    """The run's summary, its parameters, what it stores (per part: the iterations that keep
    it, chunks and bytes) and its history."""
    db = connect(db)
    found = list_runs(db, [run_id])
    if not found:
        raise ValueError(f"no run {run_id} in {db.schema}.runs")
    with db.connect() as conn:
        params = json.loads(catalog.run_row(conn, db.backend, run_id).params)
        history = [json.loads(m) for m in catalog.iteration_metrics(conn, db.backend, run_id)]
        parts = catalog.stored_parts(conn, db.backend, run_id)
    stored = {
        part: {"iterations": sorted(iterations), "chunks": int(chunks), "bytes": int(size)}
        for part, iterations, chunks, size in parts
    }
    return {**found[0], "params": params, "stored": stored, "history": history}


def delete_runs(db: Database | str | None, run_ids) -> int:
    """Delete runs with their iterations and segment models, in one transaction."""
    db = connect(db)
    with db.begin() as conn:
        catalog.ensure_tables(conn, db.backend)
        return catalog.delete_runs(conn, db.backend, [int(r) for r in run_ids])
