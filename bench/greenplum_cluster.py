"""What a Greenplum cluster does with K keys on its primaries: for each K, load a table of K
segments, fit a small CNN, and report where each key's rows live, seconds per iteration, the loss,
and the peak RSS of each primary's and the coordinator's server processes of the fit (ps, sampled
every 0.2 s). docs/greenplum.md, "What a cluster needs".

    GPCNN_DATABASE_URL=postgresql://gpadmin@host:7000/db python bench/greenplum_cluster.py --ks 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import threading
import time

import numpy as np
import sqlalchemy as sa

import gpcnn
from gpcnn.kernel import segment

SCHEMA = "gpcnn_bench_cluster"
TABLE = f"{SCHEMA}_data.k"


def model(size: int):
    keras = segment.keras_module()
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((size, size, 1)),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )


class RssSampler(threading.Thread):
    """Peak RSS (MB) per server port of the processes serving this client's gpcnn sessions."""

    def __init__(self, db: gpcnn.Database):
        super().__init__(daemon=True)
        self.db, self.peak, self.done = db, {}, threading.Event()

    def sessions(self) -> tuple[set[int], set[int]]:
        with self.db.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT sess_id, pid FROM pg_stat_activity WHERE application_name = :n "
                    "AND pid <> pg_backend_pid()"
                ),
                {"n": f"gpcnn/{os.getpid()}"},
            ).all()
        return {r.sess_id for r in rows}, {r.pid for r in rows}

    def run(self) -> None:
        while not self.done.wait(0.2):
            sessions, coordinator = self.sessions()
            ps = subprocess.run(["ps", "-eo", "pid=,rss=,args="], capture_output=True, text=True)
            for line in ps.stdout.splitlines():
                pid, rss, args = line.split(None, 2)
                found = re.search(r"postgres:\s+(\d+),.* con(\d+) ", args)
                if int(pid) in coordinator:
                    where = "coordinator"
                elif found and int(found.group(2)) in sessions and " seg" in args:
                    where = f"port {found.group(1)}"
                else:
                    continue
                self.peak[where] = max(self.peak.get(where, 0), int(rss) // 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    db = gpcnn.connect(schema=SCHEMA)
    gpcnn.install(db)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (args.images, args.size, args.size), dtype=np.uint8)
    labels = rng.integers(0, 10, args.images)
    for k in args.ks:
        info = gpcnn.load_images(
            db, TABLE, images, labels, segments=k, replace=True, progress=False
        )
        with db.connect() as conn:
            placement = conn.execute(
                sa.text(
                    f"SELECT __dist_key__, gp_segment_id, sum(n) FROM {TABLE} GROUP BY 1, 2 ORDER BY 1"
                )
            ).all()
        sampler = RssSampler(db)
        sampler.start()
        started = time.perf_counter()
        est = gpcnn.GreenplumCNN(
            model(args.size),
            database=db,
            iterations=args.iterations,
            batch_size=32,
            seed=0,
            verbose=0,
        ).fit(TABLE)
        seconds = time.perf_counter() - started
        sampler.done.set()
        sampler.join()
        print(
            json.dumps(
                {
                    "K": k,
                    "keys": list(info.keys),
                    "primary_of_key": {int(key): int(seg) for key, seg, _ in placement},
                    "images_of_key": {int(key): int(n) for key, _, n in placement},
                    "fit_s": round(seconds, 1),
                    "loss": [round(h["loss"], 4) for h in est.history_],
                    "peak_rss_mb": sampler.peak,
                }
            ),
            flush=True,
        )
    gpcnn.release_sessions()


if __name__ == "__main__":
    main()
