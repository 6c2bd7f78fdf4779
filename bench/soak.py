"""A long run (issue "Reliability", item 3): many iterations of ``models.small_cnn`` at K = 4 with
validation every iteration in the same pooled sessions, sampled every ``--every`` iterations: the
RSS of every segment session's server process, the client's RSS, its open
connections, and the rows in ``transfers`` and the run's in ``checkpoints``.

    .venv/bin/python bench/soak.py [--iterations 300] [--every 10] [--out bench/results/soak.json]

Target: RSS growth after iteration 20 at most 10 % (client and each backend); connections and
transfer rows constant; checkpoint rows bounded by the retention rule (last, best, every 10th:
they grow by one chunk set per 10 iterations, by design). Reads ``/proc``: the server must run on
this machine (the embedded one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SCHEMA = "gpcnn_bench_soak"
RSS_FROM = 20  # iterations of warm-up (TF, tracing, the model cache) before growth is measured


def rss_kib(pid: int | str) -> int:
    """Resident set size of a process, KiB (0 if it ended)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--images", type=int, default=4000, help="training images (28x28)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/soak.json"))
    args = parser.parse_args()

    import numpy as np
    import sqlalchemy as sa

    import gpcnn
    from gpcnn.engines.sessions import application_name
    from gpcnn.kernel import segment
    from gpcnn.models import small_cnn

    keras = segment.keras_module(threads=1)
    db = gpcnn.connect(None, schema=SCHEMA)
    gpcnn.install(db)
    rng = np.random.default_rng(0)
    for name, n in (("train", args.images), ("valid", args.images // 4)):
        x, y = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)
        gpcnn.load_images(db, f"{SCHEMA}.{name}", x, y, segments=4, replace=True, progress=False)

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
            transfers = f"SELECT count(*) FROM {SCHEMA}.transfers"
            checkpoints = f"SELECT count(*) FROM {SCHEMA}.checkpoints WHERE run_id = :run"
            counts = {
                "transfers": conn.execute(sa.text(transfers)).scalar(),
                "checkpoints": conn.execute(sa.text(checkpoints), {"run": est.run_id_}).scalar(),
            }
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
            if (epoch + 1) % args.every == 0 or epoch == 0:
                sample(epoch + 1)

    keras.utils.set_random_seed(7)
    est = gpcnn.GreenplumCNN(
        small_cnn(),
        iterations=args.iterations,
        batch_size=32,
        seed=1,
        database=db,
        threads_per_segment=1,
        validation_table=f"{SCHEMA}.valid",
        verbose=0,
    )
    est.fit(f"{SCHEMA}.train", callbacks=[Sampler()])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"iterations": args.iterations, "samples": samples, **summary(samples)}
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))


def summary(samples: list[dict]) -> dict:
    """Growth from the first sample at or after ``RSS_FROM`` to the last, as ratios."""
    base = next((s for s in samples if s["iteration"] >= RSS_FROM), samples[0])
    last = samples[-1]
    backends = sorted(set(base["backend_rss_kib"]) & set(last["backend_rss_kib"]))
    growth = {
        "client_rss_growth": last["client_rss_kib"] / base["client_rss_kib"] - 1,
        "backend_rss_growth_max": max(
            (last["backend_rss_kib"][p] / base["backend_rss_kib"][p] - 1 for p in backends),
            default=None,
        ),
        "same_backends": set(base["backend_rss_kib"]) == set(last["backend_rss_kib"]),
        "connections": sorted({s["connections"] for s in samples}),
        "transfers_rows": sorted({s["transfers_rows"] for s in samples}),
        "checkpoints_rows": [base["checkpoints_rows"], last["checkpoints_rows"]],
        "from_iteration": base["iteration"],
    }
    return growth


if __name__ == "__main__":
    main()
