"""Transfer learning in the database: a base pretrained elsewhere, frozen, with a new head trained
data-parallel across the segments.

    .venv/bin/python examples/transfer_learning.py [--database URL] [--segments 4] [--images 20000]

1. Pretrain a small CNN locally, with Keras, on Fashion-MNIST's classes 0-4 and save it as a
   ``.keras`` file (what a model trained elsewhere arrives as).
2. Load that file, freeze its convolutions (``trainable=False``), put a new head on them for
   classes 5-9, and store the result in the database's model library (``gpcnn.store_model``).
3. Load the images of classes 5-9 into an image table and fit the stored model by its name
   (``GreenplumCNN("fm-transfer")``): only the head trains, the frozen base stays bit-identical.
4. Predict the test images into a table with ``gpcnn.predict``, without the estimator.

The database is ``--database``, else ``$GPCNN_DATABASE_URL``, else the embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import sqlalchemy as sa

import gpcnn
from gpcnn import GreenplumCNN
from gpcnn.datasets import load_fashion_mnist
from gpcnn.models import keras_module, to_model_input

NAME = "fm-transfer"


def pretrained_file(x: np.ndarray, y: np.ndarray, path: Path) -> Path:
    """A base trained locally on classes 0-4, saved as a ``.keras`` file."""
    keras = keras_module()
    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(),
            layers.Conv2D(16, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(),
            layers.Flatten(name="features"),
            layers.Dense(5, activation="softmax", name="old_head"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(to_model_input(x[..., None]), y, epochs=1, batch_size=64, verbose=2)
    model.save(path)
    return path


def transfer_model(path: Path):
    """The file's base, frozen, with a new head for five other classes."""
    keras = keras_module()
    base = keras.saving.load_model(path, safe_mode=True, compile=False)
    for name in ("conv1", "conv2"):
        base.get_layer(name).trainable = False
    head = keras.layers.Dense(5, activation="softmax", name="new_head")
    return keras.Model(base.inputs, head(base.get_layer("features").output))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="SQLAlchemy URL (default: $GPCNN_DATABASE_URL)")
    parser.add_argument("--segments", type=int, default=4, help="segments to spread the data over")
    parser.add_argument("--images", type=int, default=20000, help="training images per half")
    parser.add_argument("--iterations", type=int, default=3, help="merges (here: epochs)")
    args = parser.parse_args()

    db = gpcnn.connect(args.database)
    print(f"gpcnn {gpcnn.install(db)} installed")
    data = load_fashion_mnist()
    old, new = data.y_train < 5, data.y_train >= 5
    keras_module().utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = pretrained_file(
            data.x_train[old][: args.images],
            data.y_train[old][: args.images],
            Path(tmp) / "base.keras",
        )
        model = transfer_model(path)
    gpcnn.store_model(
        db, NAME, model, description="Fashion-MNIST 0-4 base, head for 5-9", replace=True
    )
    print("stored models:", [m["name"] for m in gpcnn.list_models(db)])

    names = list(data.class_names[5:])
    test = data.y_test >= 5
    for table, x, y in (
        ("fm_new_train", data.x_train[new][: args.images], data.y_train[new][: args.images] - 5),
        ("fm_new_test", data.x_test[test], data.y_test[test] - 5),
    ):
        gpcnn.load_images(db, table, x, y, segments=args.segments, class_names=names, replace=True)

    estimator = GreenplumCNN(
        NAME,
        optimizer="adam",
        learning_rate=0.001,
        iterations=args.iterations,
        validation_table="fm_new_test",
        seed=0,
        database=db,
    )
    with estimator:
        estimator.fit("fm_new_train")
    for row in estimator.history_:
        print(f"iteration {row['iteration']}: test accuracy {row['val_accuracy']:.4f}")
    frozen = all(
        np.array_equal(a, b)
        for name in ("conv1", "conv2")
        for a, b in zip(
            estimator.model_.get_layer(name).get_weights(),
            model.get_layer(name).get_weights(),
            strict=True,
        )
    )
    print(f"frozen base unchanged: {frozen}")

    out = gpcnn.predict(
        db, estimator.model_, "fm_new_test", output_table="fm_new_predicted", replace=True
    )
    with db.connect() as conn:
        counts = conn.execute(
            sa.text(f"SELECT class_name, count(*) FROM {out} GROUP BY 1 ORDER BY 1")
        ).all()
    print(f"predictions in {out}:", dict(counts))
    db.close()


if __name__ == "__main__":
    main()
