"""The same seed on two engines (issue: Greenplum as the first engine, item 1): the study's settings
(the BatchNorm + Dropout CNN, SGD with momentum 0.9, optimizer_state="local", shuffle=True, bmuf,
K = 2) from the same start weights, seed and Fashion-MNIST images, on the embedded PostgreSQL and on
Greenplum; prints each iteration's loss and validation loss per engine, the keys each engine chose
and whether the final weights are bit-identical.

    .venv/bin/python bench/seed_engines.py --greenplum postgresql://gpadmin@127.0.0.1:7000/gpcnn \
        [--postgres URL] [--images 4000] [--iterations 3] [--segments 2] [--schema gpcnn_seed]

``--postgres`` defaults to the embedded PostgreSQL ($GPCNN_HOME). Both run one TF thread per
segment, so nothing but the engine differs. Tables and gpcnn's functions go into ``--schema``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpcnn
from gpcnn import GreenplumCNN, models
from gpcnn.datasets import load_fashion_mnist
from gpcnn.kernel import segment, wire

keras = segment.keras_module(threads=1)


def run(url: str | None, args, data, model) -> dict:
    """One engine: load the images, fit the study's settings, and what came out."""
    db = gpcnn.connect(url, schema=args.schema)
    try:
        gpcnn.install(db)
        train, test = f"{args.schema}.fm_seed_train", f"{args.schema}.fm_seed_test"
        n = args.images
        info = gpcnn.load_images(db, train, data.x_train[:n], data.y_train[:n],
                                 segments=args.segments, seed=0, replace=True, progress=False)  # fmt: skip
        gpcnn.load_images(db, test, data.x_test[: n // 4], data.y_test[: n // 4],
                          segments=args.segments, seed=0, replace=True, progress=False)  # fmt: skip
        est = GreenplumCNN(
            model, optimizer=models.optimizer("momentum", args.learning_rate),
            learning_rate=args.learning_rate, optimizer_state="local", shuffle=True,
            merge="bmuf", iterations=args.iterations, batch_size=32, seed=0, database=db,
            validation_table=test, threads_per_segment=1, verbose=0,
        )  # fmt: skip
        with est:
            est.fit(train)
        weights = wire.flatten(est.model_.get_weights())
        return {
            "engine": db.backend.kind,
            "dispatch": db.backend.dispatch,
            "keys": list(info.keys),
            "loss": [r["loss"] for r in est.history_],
            "val_loss": [r["val_loss"] for r in est.history_],
            "weights_sha256": hashlib.sha256(weights.tobytes()).hexdigest(),
        }
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--greenplum", required=True, help="a Greenplum URL")
    parser.add_argument("--postgres", default=None, help="default: the embedded PostgreSQL")
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--schema", default="gpcnn_seed")
    args = parser.parse_args()
    data = load_fashion_mnist()
    keras.utils.set_random_seed(0)
    model = models.bn_cnn((*data.x_train.shape[1:], 1), 10)  # the same start on both
    results = [run(url, args, data, model) for url in (args.postgres, args.greenplum)]
    for r in results:
        print(json.dumps(r))
    for name in ("loss", "val_loss"):
        print(name, " / ".join(f"{r['engine']}: " + " ".join(f"{v:.6f}" for v in r[name])
                               for r in results))  # fmt: skip
    same = len({r["weights_sha256"] for r in results}) == 1
    print("final weights bit-identical:", same)


if __name__ == "__main__":
    main()
