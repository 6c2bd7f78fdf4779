"""Predictions in the database: class probabilities of a table's buffers back to the client, or
written into a table, as MADlib's ``madlib_keras_predict`` does: computed on the segments and
inserted there, nothing through the client, the output appearing atomically.

The output is built under a staging name (committed, so that every segment session can insert
into it), filled by one INSERT … SELECT per group of keys, and renamed to its final name in one
transaction; a failure drops the staging table, and the previous output, if any, stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from gpcnn.data.tables import (
    STAGING_SUFFIX,
    ImageTable,
    TableError,
    TableName,
    checked_name,
    resolved_name,
)
from gpcnn.engines import Database, transfers
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.engines.table_records import TableRecords, made_by_gpcnn, not_gpcnns, relation_owner
from gpcnn.fit.database_errors import database_call
from gpcnn.kernel.protocol import SegmentOptions

PRED_TYPES = ("response", "prob", "topk")


def list_prediction_tables(db: Database) -> list[tuple[TableName, str]]:
    """(table, what it holds predictions of) of every table gpcnn wrote predictions into that
    still holds them: a table dropped or replaced by hand since is not listed."""
    with db.begin() as conn:
        return [
            (name, row.source)
            for row in TableRecords(conn, db.backend).prediction_tables()
            if made_by_gpcnn(
                row, relation_owner(conn, name := TableName(row.table_schema, row.table_name))
            )
        ]


def rows_per_image(pred_type: str, top_k: int | None, classes: int) -> int:
    """How many classes each image gets in the output, after checking the request."""
    if pred_type not in PRED_TYPES:
        raise ValueError(f"pred_type={pred_type!r}: choose one of {', '.join(PRED_TYPES)}")
    if pred_type == "response":
        if top_k is not None:
            raise ValueError("top_k goes with pred_type='topk'")
        return 1
    if pred_type == "prob":
        if top_k is not None:
            raise ValueError("pred_type='prob' writes every class: top_k does not apply")
        return classes
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= classes:
        raise ValueError(f"pred_type='topk' needs top_k between 1 and {classes}, got {top_k!r}")
    return top_k


@contextlib.contextmanager
def _sent(
    db: Database, model_json: str, options: SegmentOptions, weights: np.ndarray
) -> Iterator[dict]:
    """The prediction statement's parameters, ``weights`` in ``transfers`` (in chunks, as a
    training start) while it runs; ``options.image_shape`` is the model's input, which the
    segments reshape the table's items to."""
    with transfers.sent(db.backend, weights) as transfer:
        yield {
            "model": model_json,
            "options": options.with_transport(transfer, weights.size).to_json(),
            "transfer": transfer,
        }


def probabilities(
    db: Database,
    sessions: SegmentSessions,
    info: ImageTable,
    model_json: str,
    options: SegmentOptions,
    weights: np.ndarray,
) -> np.ndarray:
    """Class probabilities of every image of ``info``'s table, in ``buffer_id`` order."""
    backend = db.backend
    with _sent(db, model_json, options, weights) as params:
        ordered = database_call(
            "prediction",
            backend.run_prediction,
            sessions,
            table=info.table,
            params=params,
            keys=info.keys,
        )
    classes = info.num_classes
    return np.concatenate(
        [np.frombuffer(bytes(p), dtype="<f4").reshape(-1, classes) for _, p in ordered]
    )


def write_predictions(
    db: Database,
    sessions: SegmentSessions,
    info: ImageTable,
    output,
    pred_type: str,
    top_k: int | None,
    model: tuple[str, SegmentOptions, np.ndarray],
    replace: bool = False,
) -> TableName:
    """Predict every image of ``info``'s table into ``output`` with ``model`` (its JSON, options
    and weights). Returns the output's name."""
    with _sent(db, *model) as params:
        return _write(db, sessions, info, output, pred_type, top_k, params, replace)


def _write(db, sessions, info, output, pred_type, top_k, params, replace) -> TableName:
    info.require_ids("write predictions keyed by image id")
    k = rows_per_image(pred_type, top_k, info.num_classes)
    backend = db.backend
    name = checked_name(output)
    with db.begin() as conn:
        name = resolved_name(backend, name)
        _check_target(conn, db, name, replace)
        staging = name.with_suffix(STAGING_SUFFIX)
        backend.ensure_schema(conn, name.schema)
        conn.exec_driver_sql(backend.drop_ddl(staging, if_exists=True))
        conn.exec_driver_sql(backend.prediction_table_ddl(staging, pred_type))
    try:
        sql = backend.insert_predictions_sql(
            info.table.sql(backend), staging.sql(backend), pred_type
        )
        names = list(info.class_names) or None
        params = {**params, "top_k": k, "names": names}
        database_call("prediction", backend.run_statement, sessions, sql, params, info.keys)
        with db.begin() as conn:
            exists = _check_target(conn, db, name, replace)
            if exists:
                conn.exec_driver_sql(backend.drop_ddl(name))
            conn.exec_driver_sql(backend.rename_table_ddl(staging, name))
            assert name.schema is not None  # qualified by resolved_name
            TableRecords(conn, backend).write_prediction_table(
                name.schema, name.name, str(info.table)
            )
    except BaseException:
        with contextlib.suppress(Exception), db.begin() as conn:
            conn.exec_driver_sql(backend.drop_ddl(staging, if_exists=True))
        raise
    return name


def _check_target(conn, db: Database, name: TableName, replace: bool) -> bool:
    """Lock the output name; refuse to overwrite without ``replace``, or to overwrite an image
    table. Returns whether the output exists."""
    backend = db.backend
    backend.lock_name(conn, str(name))
    owner = relation_owner(conn, name)
    if owner is None:
        return False
    assert name.schema is not None  # _write passes the name with its schema (resolved_name)
    catalog = TableRecords(conn, backend)
    if made_by_gpcnn(catalog.image_table(name.schema, name.name), owner):
        raise TableError(f"{name} is an image table: predictions never overwrite one")
    if not made_by_gpcnn(catalog.prediction_table(name.schema, name.name), owner):
        raise TableError(not_gpcnns(name, "a predictions table"))
    if not replace:
        raise TableError(f"table {name} exists: pass replace=True to overwrite the predictions")
    return True
