"""The fixed cost of a steady iteration of a dense model of a given size, timed in parts: the
measurement the fixed-cost and Greenplum benchmarks share.

Model: 8x8x1 input, Dense(H, relu), Dense(10): 75 H + 10 weights (float32). Table: one buffer of
16 images per segment, batch 16: each segment trains ONE batch per iteration, so the iteration is
almost all fixed cost. Each fit runs three iterations and the third, steady one is measured (the
first sends the given model and loads TF in fresh segment processes; later ones of ``average``
start from the checkpoint just stored; the retention rule's delete of the first checkpoint, run
in the background after the second, overlaps the third, which waits for it before its own).
Fixed cost = that iteration's time (``seconds`` of its history row, plus storing its row) minus
the same batches trained in-process (K batches with one TF thread, divided by min(K, CPUs): the
segments run concurrently).

Parts, per iteration: ``send`` (COPY of the start into ``transfers`` and its delete), ``query``
(the training statements), ``merge`` (the client's merge after the streams ended), ``decode``
(result rows to vectors), ``store`` (what is left of the checkpoint COPY after the streams
ended), ``row`` (the iteration row, its commit, the wait for the previous retention delete),
``reclaim`` (the VACUUM in the background).
"""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.engines import dispatch, transfers
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import runs, storage
from gpcnn.fit.storage import IterationStore
from gpcnn.fit.training import Training
from gpcnn.kernel import keras_setup, segment

SCHEMA = "gpcnn_bench_overhead"
IMAGES_PER_SEGMENT = 16
INPUTS, CLASSES = 64, 10
PARTS = ("send", "query", "decode", "merge", "store", "row", "reclaim")

keras = keras_setup.keras_module(threads=1)

TIMED: dict[str, list[float]] = defaultdict(list)


def _timed(owner, name: str, part: str) -> None:
    """Wrap ``owner.name`` so that every call's duration adds to ``TIMED[part]``."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TIMED[part].append(time.perf_counter() - started)

    setattr(owner, name, wrapper)


for owner, name, part in (
    (transfers, "write_transfer", "send"),
    (transfers, "delete_transfer", "send"),
    (SegmentSessions, "map", "query"),
    (dispatch.StreamingAverage, "close", "merge"),
    (dispatch, "per_key_result", "decode"),
    (dispatch, "merged_result", "decode"),
    (Catalog, "store_checkpoint", "store"),
    (IterationStore, "streamed", "store"),  # what is left of a COPY that overlapped query
    (Training, "_store", "row"),  # the row, the commit, the wait for the last retention delete
    (storage, "reclaim", "reclaim"),  # in the background, after the retention delete
):
    _timed(owner, name, part)


def hidden_units(million: float) -> int:
    """H of the dense model closest to ``million`` weights: (INPUTS + 1 + CLASSES) H + CLASSES."""
    return max(1, round((million * 1e6 - CLASSES) / (INPUTS + 1 + CLASSES)))


def dense_model(million: float):
    """The benchmark's model of about ``million`` weights, seeded."""
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(hidden_units(million), activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )


def model_bytes(million: float) -> int:
    """The float32 bytes of ``dense_model(million)``."""
    return 4 * (hidden_units(million) * (INPUTS + 1 + CLASSES) + CLASSES)


def table_for(db, segments: int) -> str:
    """One buffer of 16 random images per segment."""
    rng = np.random.default_rng(segments)
    n = IMAGES_PER_SEGMENT * segments
    name = f"{SCHEMA}.k{segments}"
    load_images(
        db,
        name,
        rng.integers(0, 256, (n, 8, 8), dtype=np.uint8),
        rng.integers(0, CLASSES, n),
        segments=segments,
        buffer_size=IMAGES_PER_SEGMENT,
        replace=True,
        progress=False,
    )
    return name


class SteadyIteration(keras.callbacks.Callback):
    """Forget the parts timed so far when the second iteration ends (it is stored by then)."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            TIMED.clear()


def estimator(db, model, iterations: int = 1) -> GreenplumCNN:
    return GreenplumCNN(
        model,
        iterations=iterations,
        merge="average",
        optimizer="sgd",
        learning_rate=0.01,
        batch_size=IMAGES_PER_SEGMENT,
        optimizer_state="reset",
        threads_per_segment=1,
        seed=0,
        warm_start=True,
        database=db,
        verbose=0,
    )


def in_process_train(model, segments: int) -> float:
    """One segment's batch trained here, K times, over the CPUs the segments would share."""
    local = keras.models.model_from_json(model.to_json())
    local.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = segment.to_model_input(rng.integers(0, 256, (IMAGES_PER_SEGMENT, 8, 8, 1), np.uint8))
    y = rng.integers(0, CLASSES, IMAGES_PER_SEGMENT).astype("<i4")
    local.train_on_batch(x, y)  # trace
    started = time.perf_counter()
    for _ in range(segments):
        local.train_on_batch(x, y)
    return (time.perf_counter() - started) / min(segments, os.cpu_count() or 1)


def one_fit(db, table: str, million: float, k: int) -> dict[str, float]:
    """One fit of three iterations: its steady iteration's seconds, parts and fixed cost."""
    model = dense_model(million)
    est = estimator(db, model, iterations=3)
    TIMED.clear()
    with est:
        est.fit(table, callbacks=[SteadyIteration()])
    # Now, not at the end: a run that stops early leaves no gigabytes of checkpoints.
    runs.delete_runs(db, [est.run_id_])
    # Fresh segment processes for the next configuration: idle ones would keep their
    # big models cached (five 100M-weight backends are ~8 GB).
    gpcnn.release_sessions()
    got = {part: sum(values) for part, values in TIMED.items()}
    # the history row's seconds end before the row is stored
    got["seconds"] = est.history_[-1]["seconds"] + got.get("row", 0.0)
    got["local_train"] = in_process_train(model, k)
    got["fixed"] = got["seconds"] - got["local_train"]
    del est, model
    keras.backend.clear_session()
    return got


def rounds(configs, repeats: int, urls=(None,), connection: dict | None = None) -> list[dict]:
    """``repeats`` rounds of every (million, K) configuration on every URL (None:
    ``$GPCNN_DATABASE_URL`` or the embedded cluster), interleaved: round r runs each
    configuration once on each engine in turn. One row per configuration and engine: the medians
    of its parts, and every round's fixed cost. Prints a line per fit (``round R xM K=k[ engine]:
    S s, fixed F s (parts)``: ``bench/run.py --baseline`` reads it from the other side's run)."""
    handles = {url: gpcnn.connect(url, **(connection or {})) for url in urls}
    for db in handles.values():
        gpcnn.install(db)
    ks = sorted({k for _, k in configs})
    tables = {url: {k: table_for(db, k) for k in ks} for url, db in handles.items()}
    results = {(url, c): defaultdict(list) for url in urls for c in configs}
    for round_ in range(1, repeats + 1):
        for million, k in configs:
            for url, db in handles.items():
                got = one_fit(db, tables[url][k], million, k)
                for part, value in got.items():
                    results[(url, (million, k))][part].append(value)
                engine = f" {db.backend.kind}" if len(handles) > 1 else ""
                parts = ", ".join(f"{p} {got[p]:.3f}" for p in PARTS if p in got)
                print(
                    f"round {round_} {million}M K={k}{engine}: {got['seconds']:.3f} s, "
                    f"fixed {got['fixed']:.3f} s ({parts})",
                    flush=True,
                )
    rows = []
    for (url, (million, k)), got in results.items():
        medians = {part: statistics.median(values) for part, values in got.items()}
        rows.append(
            {
                "million": million,
                "segments": k,
                "engine": handles[url].backend.kind,
                "model_bytes": model_bytes(million),
                "medians": medians,
                "fixed_rounds": got["fixed"],
                "mb_per_s": model_bytes(million) / 1e6 / medians["fixed"],
            }
        )
    for db in handles.values():
        db.close()
    return rows
