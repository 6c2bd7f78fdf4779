"""Train a small CNN on the real Fashion-MNIST, data-parallel across 4 segments, inside the database.

    .venv/bin/python examples/fashion_mnist.py [--database URL] [--segments 4] [--iterations 5]

Loads the 60,000 training and 10,000 test images (Debian package ``dataset-fashion-mnist``) into
two image tables spread over the segments, trains ``GreenplumCNN`` for a few iterations (one
iteration = every segment trains one epoch on its own shard, then the segment models are averaged,
weighted by image count), prints the test accuracy of the merged model after each iteration, and
writes the history to a CSV file.

The database is ``--database``, else ``$GPCNN_DATABASE_URL``, else the embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import csv

import gpcnn
from gpcnn import GreenplumCNN
from gpcnn.datasets import load_fashion_mnist
from gpcnn.models import keras_module, small_cnn

TRAIN_TABLE = "fashion_mnist_train"
TEST_TABLE = "fashion_mnist_test"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="SQLAlchemy URL (default: $GPCNN_DATABASE_URL)")
    parser.add_argument("--segments", type=int, default=4, help="segments to spread the data over")
    parser.add_argument("--iterations", type=int, default=5, help="merges (here: epochs)")
    parser.add_argument("--out", default="fashion_mnist_history.csv", help="history CSV file")
    args = parser.parse_args()

    db = gpcnn.connect(args.database)
    print(f"gpcnn {gpcnn.install(db)} installed")  # creates or upgrades the SQL functions
    data = load_fashion_mnist()
    splits = {TRAIN_TABLE: (data.x_train, data.y_train), TEST_TABLE: (data.x_test, data.y_test)}
    for table, (x, y) in splits.items():
        info = gpcnn.load_images(
            db, table, x, y, segments=args.segments, class_names=data.class_names, replace=True
        )
        print(f"loaded {info.images:,} images into {table}: {info.images_per_segment} per segment")

    keras_module().utils.set_random_seed(0)  # the same initial weights on every run
    estimator = GreenplumCNN(
        small_cnn(),
        iterations=args.iterations,
        validation_table=TEST_TABLE,
        seed=0,
        database=db,
    )
    with estimator:
        estimator.fit(TRAIN_TABLE)

    print("iteration  train_loss  train_acc  test_loss  test_acc  seconds")
    for row in estimator.history_:
        print(
            f"{row['iteration']:9d}  {row['loss']:10.4f}  {row['accuracy']:9.4f}  "
            f"{row['val_loss']:9.4f}  {row['val_accuracy']:8.4f}  {row['seconds']:7.1f}"
        )

    columns = list(estimator.history_[0])
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(estimator.history_)
    print(f"run {estimator.run_id_}: history written to {args.out}")
    db.close()


if __name__ == "__main__":
    main()
