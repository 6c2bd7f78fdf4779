"""Dispatch: how one iteration's statements reach the segments, as objects an engine owns.

A ``Dispatch``, bound to its engine's backend, says how many sessions a fit opens and groups the
keys into one statement per session, and runs training, evaluation and prediction with them:
- ``SessionPerSegment`` (``"sessions"``, PostgreSQL's own): one session per segment, each runs the
  statement for its keys, all at once (K segments use K cores); the K results are merged here as
  they stream in (``StreamingAverage``), or by one more statement for evaluation.
- ``OneStatement`` (``"statement"``, Greenplum's only way): one statement for all keys in one
  session, ``GROUP BY`` key with the merge on top. ``connect(dispatch="statement")`` runs
  PostgreSQL this way, so the suite exercises Greenplum's path: the same statement text,
  bookkeeping and decoding.

An iteration's training ends in one of three ways, each a function here: the database merges the
K trained vectors (``merged_in_database``), the client merges the K streams (``merged_here``), or
each key's vector comes back (``per_key``). A dispatch picks one; an engine with another way
subclasses ``Dispatch`` and lists the class in its backend's ``dispatch_modes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar, Protocol

import numpy as np

from gpcnn.engines import transfers
from gpcnn.engines.copying import BinaryRows, ChunkTables
from gpcnn.engines.identifiers import Quoting, TableName
from gpcnn.engines.results import Trained, merged_result, per_key_result
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.engines.streaming import StreamingAverage
from gpcnn.engines.transfers import EVERY_KEY, StoredStart
from gpcnn.kernel import states

# The columns of a training statement's rows: the merged ones, and each key's.
MERGED_ROW = ("integer", "bytea")
KEY_ROW = ("integer", "integer", "bigint", "bytea")


class StatementSource(ChunkTables, Quoting, Protocol):
    """What a dispatch needs of its engine's ``backend.Backend``: the statements, where the
    merge of one statement runs, and its table names."""

    def merges_in_database(self, keys: int, values: int) -> bool: ...

    def training_sql(self, table_sql: str, outer: str | None, stored: bool = False) -> str: ...

    def evaluation_sql(self, table_sql: str, outer: str | None, stored: bool = False) -> str: ...

    def prediction_sql(self, table_sql: str) -> str: ...

    def copy_out_sql(self, query: str) -> str: ...


@dataclass(frozen=True)
class TrainingCall:
    """One iteration's training, as the fit hands it to the engine (``Backend.run_training``).

    ``table``: the image table; ``params``: the statement's parameters (model, options, ...);
    ``keys``: the segments that train; ``starts``: key -> start vector (or ``EVERY_KEY``), or a
    ``StoredStart``; ``merged``: the image-weighted average comes back (else each key's vector);
    ``into``: where the average may be written (a vector whose values are no longer needed);
    ``on_chunk``: told each chunk of the average as it is whole; ``reference``: the start's
    weights, that the merge's step is measured against.
    """

    table: TableName
    params: dict
    keys: Sequence[int]
    starts: Mapping[int, np.ndarray] | StoredStart
    merged: bool
    into: np.ndarray | None = None
    on_chunk: Callable[[int, np.ndarray], None] | None = None
    reference: np.ndarray | None = None


class Dispatch:
    """How iterations reach the segments, for ``backend``; an engine names the classes it runs
    (``dispatch_modes``). Subclasses say how many sessions a fit opens and which keys each
    statement serves; the runs below use that, and a subclass may replace them.

    Parameters
    ----------
    backend : StatementSource
        The engine whose statements it runs.
    """

    name: ClassVar[str] = "abstract"
    per_segment_sessions: ClassVar[bool] = False

    def __init__(self, backend: StatementSource) -> None:
        self.backend = backend

    def session_count(self, segments: int) -> int:
        """Sessions a fit of ``segments`` keys opens."""
        raise NotImplementedError

    def groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        """Which keys each session handles: one statement per group, run concurrently."""
        raise NotImplementedError

    def numbered_keys(self, segments: int) -> list[int]:
        """A new table's keys on an engine that numbers them itself (PostgreSQL): 0..K-1."""
        return list(range(segments))

    def run(
        self, sessions: SegmentSessions, sql: str, params: dict, keys: Sequence[int], binary=None
    ) -> list[tuple]:
        """``sql`` once per group of keys (``:group``), concurrently: the rows of all groups."""
        groups = self.groups(keys, len(sessions))
        rows = sessions.map(sql, [{**params, "group": group} for group in groups], binary)
        return [row for group_rows in rows for row in group_rows]

    def train(self, sessions: SegmentSessions, call: TrainingCall) -> Trained:
        """One iteration's training from ``call.starts``: the image-weighted average of the
        trained vectors with the merged metrics, or (not ``call.merged``) each key's vector and
        metrics. When one statement serves every key and the K vectors are large enough, the
        database merges them; else they are merged here, chunk by chunk, the same way, into
        ``call.into`` when given and of the average's size (the caller's model, already sent),
        telling ``call.on_chunk`` each chunk of the average as it is whole (``StreamingAverage``;
        never called when the database merges). A merge is measured against ``call.reference``
        when given (``Trained.merged_step2``)."""
        backend = self.backend
        keys, starts, merged, reference = call.keys, call.starts, call.merged, call.reference
        table_sql = call.table.sql(backend)
        stored = isinstance(starts, StoredStart)
        params = with_shards(call.params, keys)
        with transfers.statement_vectors(backend, starts, params) as params:
            params = {**params, "chunk_values": backend.chunk_values}
            groups = self.groups(keys, len(sessions))
            size = (
                starts.size if isinstance(starts, StoredStart) else next(iter(starts.values())).size
            )
            if merged and len(groups) == 1 and backend.merges_in_database(len(keys), size):
                sql = backend.training_sql(table_sql, "merge", stored)
                return merged_in_database(backend, sessions, sql, params, groups[0], reference)
            sql = backend.training_sql(table_sql, None, stored)
            if merged:
                return merged_here(
                    self, sessions, sql, params, keys, call.into, call.on_chunk, reference
                )
            return per_key(self, sessions, sql, params, keys)

    def evaluate(
        self,
        sessions: SegmentSessions,
        *,
        table: TableName,
        params: dict,
        keys: Sequence[int],
        weights: np.ndarray | StoredStart,
    ) -> dict:
        """Image-weighted loss and metrics of ``weights`` over the keys' buffers of ``table``: one
        statement adds the K states in the database; several are added here in shard order."""
        backend = self.backend
        table_sql = table.sql(backend)
        stored = isinstance(weights, StoredStart)
        vectors: Mapping[int, np.ndarray] | StoredStart
        vectors = weights if isinstance(weights, StoredStart) else {EVERY_KEY: weights}
        params = with_shards(params, keys)
        with transfers.statement_vectors(backend, vectors, params) as params:
            groups = self.groups(keys, len(sessions))
            if len(groups) == 1:
                rows = sessions.one(
                    backend.evaluation_sql(table_sql, "merge", stored),
                    {**params, "group": groups[0]},
                )
                return states.decode_result(bytes(rows[0][0]))
            rows = self.run(sessions, backend.evaluation_sql(table_sql, None, stored), params, keys)
        state = None
        for _, value in sorted(rows, key=lambda r: params["keys"].index(r[0])):
            state = states.add_states(state, bytes(value))
        return states.decode_result(states.state_result(state))

    def predict(
        self, sessions: SegmentSessions, *, table: TableName, params: dict, keys: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        """(buffer_id, probabilities) of every buffer of ``table``, in buffer order."""
        sql = self.backend.prediction_sql(table.sql(self.backend))
        rows = self.run(sessions, sql, params, keys)
        return sorted(((int(b), bytes(p)) for b, p in rows), key=lambda r: r[0])


class SessionPerSegment(Dispatch):
    """PostgreSQL's own: a session per segment, its keys' statement in each, all at once."""

    name = "sessions"
    per_segment_sessions = True

    def session_count(self, segments: int) -> int:
        return segments

    def groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        """Key i to session i mod n: one key each when there are as many sessions as keys."""
        count = min(len(keys), sessions)
        return [[int(k) for k in keys[i::count]] for i in range(count)]


class OneStatement(Dispatch):
    """Greenplum's way: one statement for every key, in one session."""

    name = "statement"

    def session_count(self, segments: int) -> int:
        return 1

    def groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        return [[int(k) for k in keys]]


def merged_in_database(
    backend: StatementSource,
    sessions: SegmentSessions,
    sql: str,
    params: dict,
    group: list[int],
    reference: np.ndarray | None = None,
) -> Trained:
    """One statement that merges the trained vectors chunk by chunk on the segments: the merged
    state (each segment's report in it) and the average come back."""
    rows = sessions.one(
        backend.copy_out_sql(sql), {**params, "group": group}, partial(BinaryRows, MERGED_ROW)
    )
    return merged_result(rows, reference)


def merged_here(
    dispatch: Dispatch,
    sessions: SegmentSessions,
    sql: str,
    params: dict,
    keys: Sequence[int],
    into: np.ndarray | None = None,
    on_chunk=None,
    reference: np.ndarray | None = None,
) -> Trained:
    """Each key's trained vector streamed back and averaged here chunk by chunk as it arrives
    (``StreamingAverage``), paced when each stream carries one key."""
    paced = all(len(group) == 1 for group in dispatch.groups(keys, len(sessions)))
    chunk_values = dispatch.backend.chunk_values
    average = StreamingAverage(params["keys"], chunk_values, paced, into, on_chunk, reference)
    sink = partial(BinaryRows, KEY_ROW, on_row=average.add, on_end=average.end_stream)
    try:
        dispatch.run(sessions, dispatch.backend.copy_out_sql(sql), params, keys, sink)
    finally:
        average.close()
    return average.result()


def per_key(
    dispatch: Dispatch, sessions: SegmentSessions, sql: str, params: dict, keys: Sequence[int]
) -> Trained:
    """Each key's metrics and trained vector, in shard order."""
    sink = partial(BinaryRows, KEY_ROW)
    rows = dispatch.run(sessions, dispatch.backend.copy_out_sql(sql), params, keys, sink)
    return per_key_result(rows, params["keys"])


def with_shards(params: dict, keys: Sequence[int]) -> dict:
    """``params`` with the table's keys in shard order: as ``:keys`` (the merge's order) and in the
    segment options (``shard_keys``: what the segments' random streams derive from)."""
    keys = [int(k) for k in keys]
    return {**params, "keys": keys, "options": params["options"].replace(shard_keys=tuple(keys))}
