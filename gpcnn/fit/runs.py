"""Runs in the database: every ``fit``, its status, and the weights and metrics of each iteration.

An iteration's row is written in one transaction as the iteration ends, so an interrupted run can be
resumed from its last stored iteration (``fit(table, resume=run_id)``). A run is ``running`` until it
ends ``finished``, ``stopped_early`` (on purpose: never resumed by itself), ``failed`` (with the
error; resumable) or ``interrupted`` (Ctrl-C; resumable like a failed one). ``find_unfinished``
matches runs on the parameters that change the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.engines.catalog import Catalog, reclaim
from gpcnn.engines.run_records import SegmentStart
from gpcnn.fit import rules
from gpcnn.result_key import result_key


@dataclass
class StoredRun:
    run_id: int
    table: str
    status: str
    params: dict  # the estimator's parameters it was started with (its merge rule among them)
    iterations: list[dict]  # history rows, in order
    weights: np.ndarray | None  # the model of the last stored iteration
    rule_state: np.ndarray | None  # what the rule needs beyond it (BMUF's momentum)
    optimizer: np.ndarray | None  # the shared optimizer state ("average" policy)
    segment_starts: dict[int, SegmentStart]  # each key's next start


def create_run(db: Database, table: str, params: dict, model_json: str) -> int:
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        return catalog.create_run(table, params, model_json)


def set_status(db: Database, run_id: int, status: str, error: str | None = None) -> None:
    with db.begin() as conn:
        Catalog(conn, db.backend).set_run_status(run_id, status, error)


def load_run(db: Database, run_id: int) -> StoredRun:
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        run = catalog.run(run_id)
        if run is None:
            raise ValueError(f"no run {run_id} in {db.schema}.runs")
        history = catalog.iterations(run_id)
        last = catalog.last_checkpoint(run_id)
        segments = catalog.segment_starts(run_id)
    iteration, parts = last if last is not None else (0, {})
    return StoredRun(
        run_id=run_id,
        table=run.table,
        status=run.status,
        params=run.params,
        iterations=[m for m in history if m["iteration"] <= iteration],
        weights=parts.get("weights"),
        rule_state=parts.get("rule_state"),
        optimizer=parts.get("optimizer"),
        segment_starts=segments,
    )


def same_result(stored: dict, params: dict) -> bool:
    """Whether a run started with ``stored`` parameters continues as one started with ``params``
    would (the parameters that change the result are equal)."""
    return result_key(stored) == result_key(params)


def finished_like(
    db: Database,
    table: str,
    params: dict,
    model_json: str,
    iterations: int,
    *,
    validation_table: object = None,
    unfinished_too: bool = False,
) -> tuple[int, list]:
    """(run id, history) of the newest run of ``table`` that finished (or, with
    ``unfinished_too``, was cut off) with the model ``model_json``, the result-changing
    parameters of ``params`` and at least ``iterations`` stored iterations, validated on
    ``validation_table`` (as stored) when given; (0, []) if none."""
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        candidates = sorted(
            (
                r.run_id
                for r in catalog.run_summaries(None)
                if r.table == table
                and (unfinished_too or r.status == "finished")
                and r.iterations >= iterations
                and same_result(r.params, params)
                and (
                    validation_table is None or r.params.get("validation_table") == validation_table
                )
            ),
            reverse=True,
        )
        wanted = architecture(model_json)
        for run_id in candidates:
            run = catalog.run(run_id)
            if run is not None and architecture(run.model_json) == wanted:
                return run_id, catalog.iterations(run_id)
    return 0, []


def architecture(model_json: str) -> str:
    """A model's JSON with the names Keras numbers (``conv2d``, ``conv2d_1``, ...) replaced by
    their order of appearance: two builds of one architecture compare equal."""
    config = json.loads(model_json)
    names: dict[str, str] = {}

    def collect(node: object) -> None:
        if isinstance(node, dict):
            config_name = node.get("config", {}).get("name") if "class_name" in node else None
            if isinstance(config_name, str):
                names.setdefault(config_name, f"#{len(names)}")
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    def renamed(node: object) -> object:
        if isinstance(node, dict):
            return {k: renamed(v) for k, v in node.items()}
        if isinstance(node, list):
            return [renamed(v) for v in node]
        return names.get(node, node) if isinstance(node, str) else node

    collect(config)
    return json.dumps(renamed(config), sort_keys=True)


def find_unfinished(db: Database | str | None, table: str, params: dict) -> int | None:
    """The newest resumable run of this table whose result-changing parameters equal ``params``
    (an estimator's ``stored_params()``) and that stored fewer iterations than asked for; None if
    there is none."""
    from gpcnn.data.tables import describe

    db = connect(db)
    name = str(describe(db, table).table)
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        found = catalog.newest_resumable(name, params)
    if found is None or found[1] == 0 or found[1] >= int(params["iterations"]):
        return None
    return found[0]


# -- lifecycle ----------------------------------------------------------------------------------


@database_argument
def list_runs(database: Database | str | None = None, run_ids=None) -> list[dict]:
    """The stored runs, one summary each, like MADlib's summary tables.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    run_ids : sequence of int, optional
        The runs to list (default: every run); ids without a run are left out.

    Returns
    -------
    list of dict
        One per run, in id order: ``run_id``, ``table``, ``status`` (``running``,
        ``finished``, ``stopped_early``, ``failed`` or ``interrupted``), ``error``, ``merge``
        (the rule), ``iterations`` (stored), ``epochs`` (of data seen), ``loss`` (the last
        training loss), ``val_accuracy``, ``best_val_accuracy``, ``val_loss``,
        ``best_val_loss`` (None without validation), ``checkpoints``, ``stored_bytes``,
        ``created_at`` and ``updated_at`` (ISO 8601).

    Examples
    --------
    >>> [r["status"] for r in gpcnn.list_runs(db)]  # doctest: +SKIP
    ['finished', 'interrupted']
    """
    db = connect(database)
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        rows = catalog.run_summaries(run_ids)
        histories = {r.run_id: catalog.iterations(r.run_id) for r in rows}
    return [
        {
            "run_id": r.run_id,
            "table": r.table,
            "status": r.status,
            "error": r.error,
            "merge": r.params.get("merge"),
            "iterations": r.iterations,
            **progress(histories[r.run_id]),
            "checkpoints": r.checkpoints,
            "stored_bytes": r.stored_bytes,
            "created_at": r.created_at.isoformat(),
            "updated_at": None if r.updated_at is None else r.updated_at.isoformat(),
        }
        for r in rows
    ]


def progress(history: list[dict]) -> dict:
    """Where a run's history got to: epochs of data seen, the last training loss, and the last
    and best (highest accuracy, lowest loss) validation values, None where none was recorded."""

    def values(metric: str) -> list[float]:
        return [row[metric] for row in history if row.get(metric) is not None]

    accuracy, loss = values("val_accuracy"), values("val_loss")
    return {
        "epochs": history[-1].get("epoch") if history else None,
        "loss": history[-1].get("loss") if history else None,
        "val_accuracy": accuracy[-1] if accuracy else None,
        "best_val_accuracy": max(accuracy, default=None),
        "val_loss": loss[-1] if loss else None,
        "best_val_loss": min(loss, default=None),
    }


@database_argument
def show_run(database: Database | str | None, run_id: int) -> dict:
    """One run in full: its summary, parameters, stored parts and history.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    run_id : int
        The run (``GreenplumCNN.run_id_``, ``list_runs``).

    Returns
    -------
    dict
        ``list_runs``'s summary, plus ``params`` (the estimator's parameters it was started
        with), ``stored`` (per part, such as ``weights``: the ``iterations`` that keep it,
        ``chunks`` and ``bytes``; a ``rule_state`` part also has its ``layout``) and
        ``history`` (one dict per iteration).

    Raises
    ------
    ValueError
        There is no run ``run_id``.
    """
    db = connect(database)
    found = list_runs(db, [run_id])
    if not found:
        raise ValueError(f"no run {run_id} in {db.schema}.runs")
    with db.connect() as conn:
        catalog = Catalog(conn, db.backend)
        run = catalog.run(run_id)
        if run is None:  # deleted since list_runs found it
            raise ValueError(f"no run {run_id} in {db.schema}.runs")
        params = run.params
        history = catalog.iterations(run_id)
        parts = catalog.stored_parts(run_id)
    stored = {
        p.part: {"iterations": p.iterations, "chunks": p.chunks, "bytes": p.bytes} for p in parts
    }
    if "rule_state" in stored:  # what the merge rule keeps beyond the model, and its layout
        stored["rule_state"]["layout"] = rules.state_layout(params.get("merge"))
    return {**found[0], "params": params, "stored": stored, "history": history}


@database_argument
def delete_runs(database: Database | str | None, run_ids) -> int:
    """Delete runs with their iterations and checkpoints, in one transaction.

    The space of their checkpoints is reclaimed at once (``catalog.reclaim``).

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    run_ids : iterable of int
        The runs to delete; ids without a run are ignored.

    Returns
    -------
    int
        The number of runs deleted.
    """
    db = connect(database)
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        deleted = catalog.delete_runs([int(r) for r in run_ids])
    reclaim(db.backend, give_back=True)
    return deleted
