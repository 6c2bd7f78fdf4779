"""The model hopper (Cerebro's MOP, MADlib's ``madlib_keras_fit_multiple_model``): M models
trained at once, each on one segment per hop, rotating, so every model sees every segment's rows
once per epoch, with sequential-SGD semantics and no merge.

It is the ``none`` rule's machinery (``rules.NoMerge``: a start vector per key sent through
``transfers``, each key's trained vector back, ``TrainingCall(merged=False)``) with the
assignment of models to keys rotated every hop. A model's optimizer state travels with it
(the segments' ``local`` policy, sent and returned with the weights), so one model under the
hopper is that model trained in one process over the keys' buffers in its visiting order.

Schedule (``hops``): with L = max(M, K) positions, model m sits at position (m + h) mod L in hop
h; positions 0..K-1 are the keys, the rest wait. So no two models share a key in a hop, each
model visits every key once in L hops (one epoch), and:
- M < K: each hop K - M segments are idle (L = K hops per epoch, M trainings each);
- M >= K, a multiple of K or not: every hop keeps all K segments busy and M - K models wait
  (L = M hops per epoch). MADlib idles segments when M is not a multiple of K; this does not.

Each model is a stored run (one row and checkpoint per epoch, the retention rule's pruning, its
status); a killed client resumes from each run's last stored epoch.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gpcnn.data.tables import ImageTable
from gpcnn.engines import Database, TrainingCall
from gpcnn.engines.catalog import Catalog
from gpcnn.fit import runs
from gpcnn.fit.database_errors import TrainingError, database_call
from gpcnn.fit.diagnostics import Diagnostics
from gpcnn.fit.schedule import plan_slices
from gpcnn.fit.storage import DEFAULT_RETENTION
from gpcnn.fit.validation import Validation
from gpcnn.kernel.protocol import SegmentOptions


def hops(models: int, keys: Sequence[int]) -> list[dict[int, int]]:
    """One epoch's hops: in each, model index -> the key it trains on (waiting models absent)."""
    positions = max(models, len(keys))
    return [
        {m: keys[(m + h) % positions] for m in range(models) if (m + h) % positions < len(keys)}
        for h in range(positions)
    ]


@dataclass
class Member:
    """One configuration under the hopper: its run, model, options (``optimizer_state`` is
    ``local``: the state travels with the model) and where it stands."""

    label: str
    run_id: int
    model_json: str
    options: SegmentOptions
    rate: Callable[[int], dict]  # batches trained so far -> the iteration's rate options
    validation: Validation
    weights: np.ndarray
    optimizer: np.ndarray | None = None
    history: list[dict] = field(default_factory=list)
    batches: int = 0  # mini-batches trained so far (a learning-rate schedule's step)


def restore(member: Member, stored: runs.StoredRun) -> None:
    """``member`` continued from its stored run's last epoch."""
    if stored.weights is None:
        return  # killed before its first epoch: it starts again
    if stored.weights.size != member.weights.size:
        raise ValueError(f"{member.label}: run {member.run_id} trained another model")
    member.weights, member.optimizer = stored.weights, stored.optimizer
    member.history = list(stored.iterations)


def train(db: Database, info: ImageTable, members: Sequence[Member], epochs: int) -> None:
    """Every member up to ``epochs`` epochs (each from where its run stands), the hops of an
    epoch one after another, the trainings of a hop at once, a session per member."""
    part = plan_slices(db, info, 1, 1).cuts[1][0]
    keys = list(info.keys)
    for m in members:  # a schedule's step continues after a resume
        per_epoch = sum(math.ceil(n / m.options.batch_size) for key in part.sizes for n in key)
        m.batches = len(m.history) * per_epoch
    sessions = {m.run_id: db.backend.open_sessions(1, m.options.threads) for m in members}
    try:
        for epoch in range(min(len(m.history) for m in members) + 1, epochs + 1):
            _epoch(db, info, keys, part, members, sessions, epoch)
        for m in members:
            runs.set_status(db, m.run_id, "finished")
    except BaseException as e:
        status = "failed" if isinstance(e, Exception) else "interrupted"
        for m in members:  # a run that had all its epochs stays finished
            with contextlib.suppress(Exception):
                if len(m.history) >= epochs:
                    runs.set_status(db, m.run_id, "finished")
                else:
                    runs.set_status(db, m.run_id, status, f"{type(e).__name__}: {e}"[:2000])
        for s in sessions.values():
            s.close()
        raise
    for s in sessions.values():
        s.release()


def _epoch(db, info, keys, part, members, sessions, epoch: int) -> None:
    """Epoch ``epoch`` of the members still behind it: the hops in turn, then each one's row and
    checkpoint. The schedule is always the one of all ``members``, so a member resumed while
    another already stored this epoch visits the keys in the order an uninterrupted search
    gives it; a hop's ahead members simply sit it out."""
    started = time.perf_counter()
    behind = {i for i, m in enumerate(members) if len(m.history) < epoch}
    done: dict[int, list[dict]] = {i: [] for i in behind}
    with ThreadPoolExecutor(max_workers=len(keys), thread_name_prefix="gpcnn-hop") as pool:
        for hop in hops(len(members), keys):
            moving = {i: key for i, key in hop.items() if i in behind}
            trainings = [
                pool.submit(
                    _visit,
                    db,
                    info,
                    part,
                    keys.index(key),
                    members[i],
                    sessions[members[i].run_id],
                    (epoch - 1) * len(keys) + len(done[i]) + 1,
                )
                for i, key in moving.items()
            ]
            for i, future in zip(moving, trainings, strict=True):
                done[i].append(future.result())
    for i in sorted(behind):
        m = members[i]
        _finish_epoch(db, m, done[i], sessions[m.run_id], epoch, started)


def _visit(db, info, part, index: int, member: Member, sessions, visit: int) -> dict:
    """One hop of one member, its ``visit``-th (what seeds and shuffles derive from): its model
    and optimizer state train on key ``info.keys[index]``'s buffers and come back; returns the
    hop's metrics."""
    key = info.keys[index]
    start = (
        member.weights
        if member.optimizer is None
        else np.concatenate([member.weights, member.optimizer])
    )
    options = member.options.for_iteration(
        iteration=visit, optimizer_sent=member.optimizer is not None, **member.rate(member.batches)
    )
    params = {
        "model": member.model_json,
        "epochs": 1,
        "keys": [key],
        "first": [part.first[index]],
        "stop": [part.stop[index]],
        "expected": [part.expected[index]],
        "options": options,
    }
    call = TrainingCall(
        table=info.table,
        params=params,
        keys=[key],
        starts={key: np.asarray(start, np.float32)},
        merged=False,
    )
    result = database_call(
        f"{member.label}, hop {visit} on key {key}", db.backend.run_training, sessions, call
    )
    metrics, vector = result.per_key[key]
    count = member.weights.size
    if metrics["images"] != part.expected[index]:
        raise TrainingError(
            f"{member.label}: key {key} trained {metrics['images']} images, expected "
            f"{part.expected[index]} (was {info.table} changed since loading?)"
        )
    if not np.isfinite(vector[:count]).all():
        raise TrainingError(f"{member.label} diverged on key {key}: lower its learning rate")
    member.weights = np.array(vector[:count], np.float32)
    member.optimizer = np.array(vector[count:], np.float32) if vector.size > count else None
    member.batches += sum(math.ceil(n / member.options.batch_size) for n in part.sizes[index])
    return {**metrics, "reports": result.segments}


def _finish_epoch(db, member: Member, visits, sessions, epoch: int, started: float) -> None:
    """The epoch's row (image-weighted train metrics over its hops, validation) and checkpoint,
    in one transaction; then the retention rule's delete. Its diagnostics are each hop's
    segment report (no merge: no spread)."""
    reports = [report for v in visits for report in v.pop("reports")]
    images = sum(v["images"] for v in visits)
    row = {"iteration": epoch, "epoch": float(epoch), "images": int(images)}
    for name in visits[0]:
        if name != "images":
            row[name] = float(sum(v[name] * v["images"] for v in visits) / images)
    row.update(Diagnostics(tuple(reports)).row())
    values = member.validation.evaluate(sessions, member.weights, None, epoch)
    row.update({f"val_{k}": v for k, v in (values or {}).items() if k != "images"})
    row["seconds"] = time.perf_counter() - started
    member.history.append(row)
    vectors = {"weights": member.weights, "rule_state": None, "optimizer": member.optimizer}
    keep = sorted(DEFAULT_RETENTION.keep(member.history))
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.store_checkpoint(member.run_id, epoch, vectors)
        catalog.insert_iteration(member.run_id, row)
        catalog.prune_checkpoints(member.run_id, keep, epoch)
