"""Transfers: the vectors a statement joins, written to gpcnn's ``transfers`` table by binary COPY
before it runs and deleted after (``write_transfer``, ``sent``, ``delete_transfer``,
``statement_vectors``), those a killed client left (``sweep_transfers``), and a start already
stored as a checkpoint, joined in place of a transfer (``StoredStart``).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from gpcnn.engines.copying import ChunkTables, write_chunks

EVERY_KEY = -1  # the transfer row of a start shared by every segment
TRANSFER_PREFIX = (("transfer_id", "bigint"), ("__dist_key__", "integer"), ("owner", "text"))
# Transfers of shape 5 have no owner: swept once this old (no statement runs for a day).
UNOWNED_TRANSFER_AGE = "1 day"


def write_transfer(backend: ChunkTables, vectors: Mapping[int, np.ndarray]) -> int:
    """Write the vectors of one statement (key -> float32 vector; ``EVERY_KEY`` for a start
    shared by all) in chunks, committed, and return their ``transfer_id``. The rows name their
    owner, the writing connection's application_name (``gpcnn/<client pid>``), for
    ``sweep_transfers``."""
    transfer = secrets.randbits(62)
    with backend.engine.begin() as conn:
        owner = conn.execute(sa.select(sa.func.current_setting("application_name"))).scalar()
        rows = [((transfer, key, owner), vector) for key, vector in vectors.items()]
        write_chunks(conn, backend, f"{backend.qschema}.transfers", TRANSFER_PREFIX, rows)
    return transfer


def _transfers(schema: str) -> sa.TableClause:
    return sa.table(
        "transfers",
        sa.column("transfer_id"),
        sa.column("owner"),
        sa.column("created_at"),
        schema=schema,
    )


def sweep_transfers(conn: sa.Connection, schema: str) -> int:
    """Delete the transfers of clients that are gone (killed before their ``finally`` ran), in
    the caller's transaction; the rows deleted. A transfer's owner is alive while any backend
    carries its application_name: every gpcnn client holds connections (its pool, its segment
    sessions) for as long as it uses one. Ownerless rows (shape 5) go once a day old."""
    activity = sa.table("pg_stat_activity", sa.column("application_name"), schema="pg_catalog")
    alive = conn.execute(
        sa.select(activity.c.application_name).distinct().where(activity.c.application_name != "")
    ).scalars()
    t = _transfers(schema)
    owned = sa.and_(t.c.owner != "", t.c.owner.not_in(list(alive)))
    old = sa.and_(
        t.c.owner == "",
        t.c.created_at < sa.func.now() - sa.cast(UNOWNED_TRANSFER_AGE, sa.Interval),
    )
    return conn.execute(sa.delete(t).where(sa.or_(owned, old))).rowcount


def delete_transfer(backend: ChunkTables, transfer: int) -> None:
    transfers = _transfers(backend.schema)
    with backend.engine.begin() as conn:
        conn.execute(sa.delete(transfers).where(transfers.c.transfer_id == transfer))


@contextlib.contextmanager
def sent(backend: ChunkTables, vector: np.ndarray) -> Iterator[int]:
    """``vector`` in ``transfers`` for the statements of a block (the same for every key); its
    ``transfer_id``, deleted afterwards."""
    transfer = write_transfer(backend, {EVERY_KEY: vector})
    try:
        yield transfer
    finally:
        delete_transfer(backend, transfer)


@dataclass(frozen=True)
class StoredStart:
    """A start already stored: the ``weights`` checkpoint of ``iteration`` of run ``run_id``, the
    same for every key. The training statement joins it where it would join a new transfer, so
    a rule whose next start is the model it just stored (``average`` without optimizer state)
    does not write the model twice per iteration."""

    run_id: int
    iteration: int
    size: int  # values


@contextlib.contextmanager
def statement_vectors(
    backend: ChunkTables, vectors: Mapping[int, np.ndarray] | StoredStart, params: dict
) -> Iterator[dict]:
    """``params`` naming a statement's vectors (key -> vector, written to ``transfers`` and
    deleted afterwards; or a ``StoredStart``), with the token that names them in the segment
    processes and their size in ``options`` (a ``kernel.protocol.SegmentOptions``, encoded
    here)."""
    if isinstance(vectors, StoredStart):
        source = {"start_run": vectors.run_id, "start_iteration": vectors.iteration}
        token, size = secrets.randbits(62), vectors.size
    else:
        sizes = {vector.size for vector in vectors.values()}
        if len(sizes) != 1:
            raise ValueError(f"start vectors of different sizes {sorted(sizes)}")
        token, size = write_transfer(backend, vectors), sizes.pop()
        source = {"transfer": token}
    options = params["options"].with_transport(token, size)
    try:
        yield {**params, **source, "options": options.to_json()}
    finally:
        if "transfer" in source:
            delete_transfer(backend, token)
