"""Fixed cost of an iteration for big dense models (issue 12), on the embedded PostgreSQL.

    .venv/bin/python bench/overhead.py [--sizes 0.1 1 10 25 100] [--segments 2 4] \
        [--big 250] [--repeats 5] [--chunk-bytes N] [--out bench/overhead.json]
    .venv/bin/python bench/overhead.py --sizes 1 25 --segments 2 --big \
        --urls embedded postgresql://gpadmin@host:5432/db     # engines interleaved per round
    .venv/bin/python bench/overhead.py --memory 25 2      # one memory measurement (own process)
    .venv/bin/python bench/overhead.py --storage 25 100   # disk use after 100 iterations at 25M

Model: 8x8x1 input, Dense(H, relu), Dense(10): 75 H + 10 weights (float32). Table: one buffer of
16 images per segment, batch 16: each segment trains ONE batch per iteration, so the iteration is
almost all fixed cost. Each fit runs three iterations and the third, steady one is measured (the
first sends the given model; later ones of ``average`` start from the checkpoint just stored; the
retention rule's delete of the first checkpoint, run in the background after the second, overlaps
the third, which waits for it before its own: the third pays whatever the overlap did not hide).
Fixed cost = that iteration's time (``seconds`` of its history row: send, train, merge, decode;
plus storing the iteration, which follows it) minus the same batches trained in-process (K
batches with one TF thread, divided by min(K, CPUs): the segments run concurrently). Repetitions
are interleaved: round r runs every configuration once (the 100M and 250M ones too, last in each
round), each fit in fresh segment processes, so its first iteration loads TF and builds the model
and the later ones are steady.

Parts, per iteration (medians): ``send`` (COPY of the start into ``transfers`` and its delete),
``query`` (the training statements: chunks joined, weights set, batches trained, the trained
vector read and sent back in chunks; in "statement" dispatch the merge too), ``merge`` (the
client's chunk merge of the K results, "sessions" dispatch: done as they arrive, so mostly inside
``query``; this is the rest, after the streams ended), ``decode`` (result rows to vectors),
``store`` (the checkpoint COPY; for ``average`` it runs while the result streams arrive,
and this is only what is left of it after they ended), ``row`` (the iteration row and its
commit, then waiting for the
previous iteration's retention delete and VACUUM, where the overlap did not hide it), ``reclaim``
(that VACUUM of checkpoints and transfers, in the background: part of ``row`` only where it was
not hidden).
In-process, in this process, on the same model: ``set`` (weights into the model), ``get`` (the
trained vector out of it), ``chunks`` (cutting it into chunk bytes, as ``state_chunks`` does).
MB/s = model bytes (float32) / fixed cost, 1 MB = 10^6 bytes.

Memory (``--memory SIZE K``, a fresh process with fresh segment sessions): peak RSS (VmHWM) of
each segment backend minus its VmHWM after the environment probe, and of this client minus its
VmHWM once the model is built, over one warm-up fit and one measured iteration, in multiples of
the model's bytes. TF's own (``--tf-own SIZE``, another fresh process): the same model built,
compiled and trained on two batches with plain Keras; the segment's peak beyond it is gpcnn's.

Storage (``--storage SIZE ITERATIONS``): one fit of that many iterations (default retention:
the last, the best and every 10th kept), then the bytes on disk of ``checkpoints`` and
``transfers`` (``pg_total_relation_size``: TOAST, indexes, free space maps) against the bytes
of their live rows, and the bytes on disk once ``runs delete`` has removed the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import sqlalchemy as sa

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.engines import dispatch, migrations, transfers
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import runs, storage
from gpcnn.fit.storage import IterationStore
from gpcnn.fit.training import Training
from gpcnn.kernel import segment, wire

SCHEMA = "gpcnn_bench_overhead"
IMAGES_PER_SEGMENT = 16
INPUTS, CLASSES = 64, 10

keras = segment.keras_module(threads=1)

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
    hidden = hidden_units(million)
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )


def table_for(db, segments: int) -> str:
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


def in_process(model, segments: int, chunk_values: int) -> dict[str, float]:
    """One segment's batch trained here, and the in-segment vector work, in seconds."""
    local = keras.models.model_from_json(model.to_json())
    local.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = segment.to_model_input(rng.integers(0, 256, (IMAGES_PER_SEGMENT, 8, 8, 1), np.uint8))
    y = rng.integers(0, CLASSES, IMAGES_PER_SEGMENT).astype("<i4")
    local.train_on_batch(x, y)  # trace
    started = time.perf_counter()
    for _ in range(segments):
        local.train_on_batch(x, y)
    train = (time.perf_counter() - started) / min(segments, os.cpu_count() or 1)
    vector = wire.vector_of(list(local.weights))
    started = time.perf_counter()
    wire.set_model_weights(local, vector)
    set_seconds = time.perf_counter() - started
    started = time.perf_counter()
    vector = wire.vector_of(list(local.weights))
    get_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, vector.size, chunk_values):
        vector[start : start + chunk_values].tobytes()
    chunks = time.perf_counter() - started
    return {"train": train, "set": set_seconds, "get": get_seconds, "chunks": chunks}


def measure(sizes, segments, big, repeats, connection: dict, urls=(None,)) -> list[dict]:
    """Rounds of every configuration on every URL (None: ``$GPCNN_DATABASE_URL`` or the embedded
    cluster), interleaved: round r runs each configuration once on each engine in turn, so a
    drift of the shared machine falls on all alike."""
    handles = {url: gpcnn.connect(url, **connection) for url in urls}
    for db in handles.values():
        gpcnn.install(db)
    configs = [(m, k) for m in sizes for k in segments] + [(m, 2) for m in big]
    ks = sorted({k for _, k in configs})
    tables = {url: {k: table_for(db, k) for k in ks} for url, db in handles.items()}
    results = {(url, c): defaultdict(list) for url in urls for c in configs}
    for round_ in range(1, repeats + 1):
        for million, k in configs:
            for url, db in handles.items():
                got = results[(url, (million, k))]
                seconds, parts = _one_fit(db, tables[url][k], million, k, got)
                engine = f" {db.backend.kind}" if len(handles) > 1 else ""
                print(
                    f"round {round_} {million}M K={k}{engine}: {seconds:.3f} s, "
                    f"fixed {got['fixed'][-1]:.3f} s ({parts})",
                    flush=True,
                )
    rows = []
    for (url, (million, k)), got in results.items():
        model_bytes = 4 * sum(wire.sizes(wire.manifest(dense_model(million))))
        medians = {part: statistics.median(values) for part, values in got.items()}
        medians["mb_per_s"] = model_bytes / 1e6 / medians["fixed"]
        engine = {"engine": handles[url].backend.kind} if len(handles) > 1 else {}
        rows.append(
            {"million": million, "segments": k, **engine, "model_bytes": model_bytes, **medians}
        )
    return rows


def _one_fit(db, table: str, million: float, k: int, got: dict) -> tuple[float, str]:
    """One fit of three iterations; its steady iteration's parts appended to ``got``."""
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
    for part, values in TIMED.items():
        got[part].append(sum(values))
    # the history row's seconds end before the row is stored
    got["seconds"].append(est.history_[-1]["seconds"] + got["row"][-1])
    local = in_process(model, k, db.backend.chunk_values)
    for part, value in local.items():
        got[f"local_{part}"].append(value)
    got["fixed"].append(got["seconds"][-1] - local["train"])
    parts = ", ".join(f"{p} {got[p][-1]:.3f}" for p in PARTS if p in got)
    del est, model
    keras.backend.clear_session()
    return got["seconds"][-1], parts


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def memory(million: float, k: int, connection: dict) -> dict:
    """Peak RSS beyond the baselines, in bytes (fresh process, fresh segment sessions)."""
    db = gpcnn.connect(**connection)
    gpcnn.install(db)
    table = table_for(db, k)
    sessions = db.backend.open_sessions(k, 1)
    sessions.map(f"SELECT {db.backend.qschema}.probe(1)", [{}] * len(sessions))
    pids = [conn.get_backend_pid() for conn in sessions._connections]
    backend_base = {pid: _hwm(pid) for pid in pids}
    sessions.release()  # to the pool: the estimator takes these very sessions
    model = dense_model(million)
    client_base = _hwm(os.getpid())
    est = estimator(db, model)
    with est:
        for _ in range(2):  # a warm-up fit, then the measured one; each is a run of its own
            est.fit(table)
            runs.delete_runs(db, [est.run_id_])
        peaks = {pid: _hwm(pid) - backend_base[pid] for pid in pids}
    model_bytes = 4 * sum(wire.sizes(wire.manifest(model)))
    return {
        "million": million,
        "segments": k,
        "dispatch": db.backend.dispatch,
        "model_bytes": model_bytes,
        "backend_peak_x": max(peaks.values()) / model_bytes,
        "client_peak_x": (_hwm(os.getpid()) - client_base) / model_bytes,
    }


def _disk_and_live(db) -> tuple[int, int]:
    """(bytes on disk, bytes of live rows) of checkpoints and transfers."""
    disk = live = 0
    with db.connect() as conn:
        for name in migrations.CHUNKED:
            table = migrations.qualified(db.backend, name)
            disk += conn.execute(sa.select(sa.func.pg_total_relation_size(table))).scalar()
            live += conn.exec_driver_sql(
                f"SELECT coalesce(sum(octet_length(data)), 0) FROM {table}"
            ).scalar()
    return disk, live


def storage(million: float, iterations: int, connection: dict) -> dict:
    """Disk use of the chunk tables after one fit of ``iterations``, and after its delete."""
    db = gpcnn.connect(**connection)
    gpcnn.install(db)
    table = table_for(db, 2)
    start_disk, _ = _disk_and_live(db)
    est = estimator(db, dense_model(million), iterations=iterations)
    TIMED.clear()
    started = time.perf_counter()
    with est:
        est.fit(table)
    seconds = time.perf_counter() - started
    disk, live = _disk_and_live(db)
    runs.delete_runs(db, [est.run_id_])
    deleted_disk, _ = _disk_and_live(db)
    return {
        "million": million,
        "iterations": iterations,
        "fit_seconds": seconds,
        "reclaim_seconds_median": statistics.median(TIMED["reclaim"] or [0]),
        "disk_before": start_disk,
        "disk": disk,
        "live": live,
        "disk_x_live": disk / max(live, 1),
        "disk_after_delete": deleted_disk,
    }


def tf_own(million: float) -> dict:
    """TensorFlow's own peak for the model, in this fresh process: VmHWM after building,
    compiling and training two batches with Keras (variables, gradients, the traced step) minus
    VmHWM before; what a segment needs beyond it is gpcnn's."""
    baseline = _hwm(os.getpid())
    model = dense_model(million)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = segment.to_model_input(rng.integers(0, 256, (IMAGES_PER_SEGMENT, 8, 8, 1), np.uint8))
    y = rng.integers(0, CLASSES, IMAGES_PER_SEGMENT).astype("<i4")
    model.train_on_batch(x, y)
    model.train_on_batch(x, y)
    model_bytes = 4 * sum(wire.sizes(wire.manifest(model)))
    return {"million": million, "tf_own_x": (_hwm(os.getpid()) - baseline) / model_bytes}


PARTS = ("send", "query", "decode", "merge", "store", "row", "reclaim")


def markdown(report: dict) -> str:
    """The tables of docs/benchmarks.md from a report (``--markdown REPORT.json``)."""
    lines = [
        "| weights | K | iteration s | in-process train s | fixed s | MB/s | "
        + " | ".join(f"{p} s" for p in PARTS)
        + " | set / get / chunks s (in-process) |",
        "|---|---|---|---|---|---|" + "---|" * len(PARTS) + "---|",
    ]
    for r in report["rows"]:
        parts = " | ".join(f"{r.get(p, 0):.3f}" for p in PARTS)
        local = f"{r['local_set']:.3f} / {r['local_get']:.3f} / {r['local_chunks']:.3f}"
        lines.append(
            f"| {r['million']:g}M ({r['model_bytes'] / 1e6:.1f} MB) | {r['segments']} | "
            f"{r['seconds']:.3f} | {r['local_train']:.3f} | {r['fixed']:.3f} | "
            f"{r['mb_per_s']:.0f} | {parts} | {local} |"
        )
    if report.get("memory"):
        lines += [
            "",
            "| weights | K | segment backend peak (× model) | TF's own | beyond TF's own | "
            "client peak |",
            "|---|---|---|---|---|---|",
        ]
        for m in report["memory"]:
            own = m.get("tf_own_x")
            beyond = "–" if own is None else f"{m['backend_peak_x'] - own:.2f}"
            own = "–" if own is None else f"{own:.2f}"
            lines.append(
                f"| {m['million']:g}M ({m['model_bytes'] / 1e6:.1f} MB) | {m['segments']} | "
                f"{m['backend_peak_x']:.2f} | {own} | {beyond} | {m['client_peak_x']:.2f} |"
            )
    return "\n".join(lines)


ROUND_LINE = re.compile(r"round (\d+) ([\d.]+)M K=(\d+)( \w+)?: ([\d.]+) s, fixed ([\d.]+) s")


def rounds_markdown(log: str) -> str:
    """Medians per configuration from the ``round …`` lines this script prints (``--rounds``)."""
    found: dict[tuple[float, int, str], list[tuple[float, float]]] = defaultdict(list)
    for match in ROUND_LINE.finditer(log):
        _, million, k, engine, seconds, fixed = match.groups()
        found[(float(million), int(k), (engine or "").strip())].append(
            (float(seconds), float(fixed))
        )
    lines = [
        "| weights | K | engine | rounds | iteration s (median) | fixed s (median) "
        "| fixed s (min–max) | MB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (million, k, engine), values in found.items():
        model_bytes = 4 * (hidden_units(million) * (INPUTS + 1 + CLASSES) + CLASSES)
        fixed = [f for _, f in values]
        median = statistics.median(fixed)
        lines.append(
            f"| {million:g}M ({model_bytes / 1e6:.1f} MB) | {k} | {engine or '–'} | {len(values)} | "
            f"{statistics.median(s for s, _ in values):.3f} | {median:.3f} | "
            f"{min(fixed):.3f}–{max(fixed):.3f} | {model_bytes / 1e6 / median:.0f} |"
        )
    return "\n".join(lines)


def _fresh_process(*args: str) -> dict:
    """This script run with ``args`` in a new process; its last line, parsed."""
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[0.1, 1, 10, 25, 100])
    parser.add_argument("--segments", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--big", type=float, nargs="*", default=[250], help="at K = 2 only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dispatch", choices=["sessions", "statement"], default=None)
    parser.add_argument(
        "--urls",
        nargs="+",
        default=None,
        help="engines to interleave in each round ('embedded': $GPCNN_DATABASE_URL, else gpcnn's own)",
    )
    parser.add_argument("--chunk-bytes", type=int, default=None, help="default: gpcnn's")
    parser.add_argument("--memory", nargs=2, metavar=("MILLION", "K"))
    parser.add_argument("--storage", nargs=2, metavar=("MILLION", "ITERATIONS"))
    parser.add_argument("--memory-runs", nargs="*", default=[], metavar="MILLION:K")
    parser.add_argument("--tf-own", type=float, metavar="MILLION", help=argparse.SUPPRESS)
    parser.add_argument(
        "--add-tf-own", type=Path, metavar="REPORT", help="add TF's own peak to a report's memory"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/overhead.json"))
    parser.add_argument("--markdown", nargs="+", type=Path, metavar="REPORT")
    parser.add_argument("--rounds", type=Path, metavar="LOG", help="medians from a run's log")
    args = parser.parse_args(argv)
    connection = {"dispatch": args.dispatch, "chunk_bytes": args.chunk_bytes}
    if args.rounds:
        print(rounds_markdown(args.rounds.read_text()))
        return 0
    if args.markdown:
        for path in args.markdown:
            print(markdown(json.loads(path.read_text())), end="\n\n")
        return 0
    if args.memory:
        print(json.dumps(memory(float(args.memory[0]), int(args.memory[1]), connection)))
        return 0
    if args.storage:
        print(json.dumps(storage(float(args.storage[0]), int(args.storage[1]), connection)))
        return 0
    if args.tf_own:
        print(json.dumps(tf_own(args.tf_own)))
        return 0
    if args.add_tf_own:
        report = json.loads(args.add_tf_own.read_text())
        for row in report["memory"]:
            row["tf_own_x"] = _fresh_process("--tf-own", str(row["million"]))["tf_own_x"]
        args.add_tf_own.write_text(json.dumps(report, indent=1))
        return 0
    urls = [None if u == "embedded" else u for u in args.urls or ["embedded"]]
    report = {
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "dispatch": args.dispatch or "native",
        "chunk_bytes": args.chunk_bytes,
        "rows": measure(args.sizes, args.segments, args.big, args.repeats, connection, urls),
        "memory": [],
    }
    args.out.write_text(json.dumps(report, indent=1))  # kept if a memory run fails
    for spec in args.memory_runs:
        million, k = spec.split(":")
        options = ["--dispatch", args.dispatch] if args.dispatch else []
        options += ["--chunk-bytes", str(args.chunk_bytes)] if args.chunk_bytes else []
        row = _fresh_process("--memory", million, k, *options)
        row["tf_own_x"] = _fresh_process("--tf-own", million)["tf_own_x"]
        report["memory"].append(row)
    args.out.write_text(json.dumps(report, indent=1))
    for row in report["rows"]:
        print(
            f"{row['million']:>6}M K={row['segments']}: fixed {row['fixed']:.3f} s "
            f"({row['mb_per_s']:.0f} MB/s), iteration {row['seconds']:.3f} s"
        )
    for row in report["memory"]:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
