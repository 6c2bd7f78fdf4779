"""Tiny data and a tiny CNN shared by the training tests: learnable in a few iterations, fast on
one thread."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa

from gpcnn.kernel import keras_setup


def learnable_images(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """n 8×8 gray images of 3 classes, each class brightening a different third of the image."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    images = rng.integers(0, 120, (n, 8, 8), dtype=np.uint8)
    for c in range(3):
        images[labels == c, :, c * 2 : c * 2 + 3] += 120
    return images, labels


def tiny_cnn(classes: int = 3):
    """Conv2D(3, 3×3) → Dense: the same initial weights every call (seed 7)."""
    keras = keras_setup.keras_module()
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(3, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(classes, activation="softmax"),
        ]
    )


def dense_net(classes: int = 3):
    """Flatten → Dense: the smallest model that trains (seed 7), for tests about everything but
    the model."""
    keras = keras_setup.keras_module()
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(classes, activation="softmax"),
        ]
    )


def dense_rows(input_shape=(4,), classes: int = 3):
    """Dense(16, relu) → Dense(classes) for feature rows of any width, the same initial weights
    every call (seeded initializers): the model function of scikit-learn's checks."""
    keras = keras_setup.keras_module()
    return keras.Sequential(
        [
            keras.Input(tuple(input_shape)),
            keras.layers.Flatten(),
            keras.layers.Dense(16, "relu", kernel_initializer=keras.initializers.GlorotUniform(1)),
            keras.layers.Dense(
                classes, "softmax", kernel_initializer=keras.initializers.GlorotUniform(2)
            ),
        ]
    )


def break_segment(db, table: str, key: int) -> None:
    """Cut the pixels of every buffer of segment ``key`` of an image table to three bytes: the
    client sees nothing wrong, and that segment fails inside the database when it decodes them."""
    with db.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE {table} SET x = substring(x FROM 1 FOR 3) WHERE __dist_key__ = {int(key)}"
        )


def image_rows(db, table: str, images: np.ndarray, labels: np.ndarray) -> None:
    """``table`` (made again) with one row per image, as ``pack_table`` reads them: ``id``,
    ``x`` (the pixels, smallint[]) and ``y``."""
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(f"CREATE TABLE {table} (id bigint, x smallint[], y integer)")
        conn.execute(
            sa.text(f"INSERT INTO {table} VALUES (:i, :x, :y)"),
            [
                {"i": i, "x": x.ravel().tolist(), "y": int(y)}
                for i, (x, y) in enumerate(zip(images, labels, strict=True))
            ],
        )


def packed(db, source: str, target: str):
    """``pack_table`` of ``image_rows``' table into an image table of 2 segments of 8x8 images."""
    import gpcnn

    return gpcnn.pack_table(
        db,
        source,
        target,
        x_column="x",
        y_column="y",
        id_column="id",
        shape=(8, 8, 1),
        segments=2,
        replace=True,
    )
