"""Tiny data and a tiny CNN shared by the training tests: learnable in a few iterations, fast on
one thread."""

from __future__ import annotations

import numpy as np

from gpcnn.kernel import segment


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
    keras = segment.keras_module()
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
    keras = segment.keras_module()
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
    keras = segment.keras_module()
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
