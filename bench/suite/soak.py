"""Benchmark ``soak``: memory, connections and rows over a long run."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .base import Benchmark, Context, Outcome, Table, Target

SCHEMA = "gpcnn_bench_soak"
GROWTH_LIMIT = 0.10


def rss_kib(pid: int | str) -> int:
    """Resident set size of a process, KiB (0 if it ended)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:"))


def run(context: Context) -> Outcome:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    import numpy as np
    import sqlalchemy as sa

    import gpcnn
    from gpcnn.engines.sessions import application_name
    from gpcnn.fit import runs
    from gpcnn.kernel import keras_setup
    from gpcnn.models import small_cnn

    keras = keras_setup.keras_module(threads=1)
    db = gpcnn.connect(context.database, schema=SCHEMA)
    gpcnn.install(db)
    rng = np.random.default_rng(0)
    images, k = context["images"], context["segments"]
    for name, n in (("train", images), ("valid", images // 4)):
        x, y = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)
        gpcnn.load_images(db, f"{SCHEMA}.{name}", x, y, segments=k, replace=True, progress=False)
    samples: list[dict] = []

    def sample(iteration: int) -> None:
        with db.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT pid, query LIKE '%.train(%' OR query LIKE '%.evaluate(%' "
                    "FROM pg_stat_activity WHERE application_name = :name "
                    "AND pid <> pg_backend_pid() ORDER BY pid"
                ),
                {"name": application_name()},
            ).all()
            pids = [pid for pid, segment_work in rows if segment_work]  # the segment sessions
            counts = {
                "transfers": conn.execute(sa.text(f"SELECT count(*) FROM {SCHEMA}.transfers")),
                "checkpoints": conn.execute(
                    sa.text(f"SELECT count(*) FROM {SCHEMA}.checkpoints WHERE run_id = :run"),
                    {"run": est.run_id_},
                ),
            }
            counts = {name: result.scalar() for name, result in counts.items()}
        samples.append(
            {
                "iteration": iteration,
                "client_rss_kib": rss_kib("self"),
                "backend_rss_kib": {str(p): rss_kib(p) for p in pids},
                "connections": len(rows) + 1,  # this one too
                **{f"{t}_rows": c for t, c in counts.items()},
            }
        )
        print(json.dumps(samples[-1]), flush=True)

    class Sampler(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if (epoch + 1) % context["every"] == 0 or epoch == 0:
                sample(epoch + 1)

    keras.utils.set_random_seed(7)
    est = gpcnn.GreenplumCNN(
        small_cnn(),
        iterations=context["iterations"],
        batch_size=32,
        seed=1,
        database=db,
        threads_per_segment=1,
        validation_table=f"{SCHEMA}.valid",
        verbose=0,
    )
    est.fit(f"{SCHEMA}.train", callbacks=[Sampler()])
    runs.delete_runs(db, [est.run_id_])
    db.close()
    return outcome(samples, context["warm_up"])


def summary(samples: list[dict], warm_up: int) -> dict:
    """Growth from the first sample at or after ``warm_up`` iterations to the last, as ratios."""
    base = next((s for s in samples if s["iteration"] >= warm_up), samples[0])
    last = samples[-1]
    backends = sorted(set(base["backend_rss_kib"]) & set(last["backend_rss_kib"]))
    return {
        "from_iteration": base["iteration"],
        "to_iteration": last["iteration"],
        "client_rss_kib": [base["client_rss_kib"], last["client_rss_kib"]],
        "client_rss_growth": last["client_rss_kib"] / base["client_rss_kib"] - 1,
        "backend_rss_kib": [base["backend_rss_kib"], last["backend_rss_kib"]],
        "backend_rss_growth_max": max(
            (last["backend_rss_kib"][p] / base["backend_rss_kib"][p] - 1 for p in backends),
            default=None,
        ),
        "same_backends": set(base["backend_rss_kib"]) == set(last["backend_rss_kib"]),
        "connections": sorted({s["connections"] for s in samples}),
        "transfers_rows": sorted({s["transfers_rows"] for s in samples}),
        "checkpoints_rows": [base["checkpoints_rows"], last["checkpoints_rows"]],
    }


def outcome(samples: list[dict], warm_up: int) -> Outcome:
    """Tables and targets from the samples."""
    s = summary(samples, warm_up)
    span = f"iteration {s['from_iteration']} → {s['to_iteration']}"
    backend_growth = s["backend_rss_growth_max"]
    growth_text = "–" if backend_growth is None else f"{backend_growth:+.2%}"
    targets = [
        Target(
            f"client RSS grows ≤ {GROWTH_LIMIT:.0%} ({span})",
            f"{s['client_rss_kib'][0]:,} → {s['client_rss_kib'][1]:,} KiB "
            f"({s['client_rss_growth']:+.2%})",
            s["client_rss_growth"] <= GROWTH_LIMIT,
        ),
        Target(
            f"each segment backend's RSS grows ≤ {GROWTH_LIMIT:.0%}, the same processes throughout",
            f"largest growth {growth_text}; same processes: {s['same_backends']}",
            None
            if backend_growth is None
            else backend_growth <= GROWTH_LIMIT and s["same_backends"],
        ),
        Target(
            "the client's open connections constant",
            ", ".join(map(str, s["connections"])),
            len(s["connections"]) == 1,
        ),
        Target(
            "rows in `transfers` constant",
            ", ".join(map(str, s["transfers_rows"])),
            len(s["transfers_rows"]) == 1,
        ),
    ]
    table = Table(
        "Samples (the run's checkpoint rows grow by one per 10 iterations by design: retention "
        "keeps the last, the best and every 10th).",
        [
            "iteration",
            "client RSS KiB",
            "segment backends' RSS KiB",
            "connections",
            "transfers rows",
            "checkpoint rows",
        ],
        [
            [
                x["iteration"],
                f"{x['client_rss_kib']:,}",
                " ".join(f"{v:,}" for v in x["backend_rss_kib"].values()),
                x["connections"],
                x["transfers_rows"],
                x["checkpoints_rows"],
            ]
            for x in samples
        ],
    )
    return Outcome([table], targets, {"samples": samples, "summary": s})


BENCHMARK = Benchmark(
    name="soak",
    title="Memory and connections over a long run",
    question="Does a long fit hold its memory, connections and rows flat?",
    method=(
        "`models.small_cnn` on random 28×28 images at K = 4 (one session per segment), batch "
        "32, validation on a quarter as many images every iteration in the same pooled "
        "sessions; at iteration 1 and every `every` iterations the RSS of each segment "
        "session's server process and of the client, the client's open connections, and the "
        "rows in `transfers` and the run's in `checkpoints` are sampled. Growth is read from "
        "the first sample after the warm-up (TF, tracing, the model cache) to the last. Reads "
        "/proc: the server must run on this machine."
    ),
    defaults={"iterations": 300, "every": 10, "images": 1000, "segments": 4, "warm_up": 20},
    quick={"iterations": 30},
    run=run,
)
