"""What every reader of dataset files shares: the train/test ``Dataset`` it returns, its error, and
the checks of images against labels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpcnn.data.sources import ArrayImages


class DatasetError(ValueError):
    """A dataset file is missing or does not hold what its format promises."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split of labelled images, as the loaders return it.

    The fields are read-only attributes of the same names.

    Parameters
    ----------
    name : str
        The dataset's name, such as ``"fashion-mnist"``.
    x_train : ndarray
        The training images, such as (N, H, W) or (N, H, W, C) uint8 pixels.
    y_train : ndarray
        The training images' class indices.
    x_test : ndarray
        The test images, of the training images' shape.
    y_test : ndarray
        The test images' class indices.
    class_names : tuple of str
        A name per class, in class order.

    Examples
    --------
    >>> from gpcnn import datasets
    >>> data = datasets.load_fashion_mnist()  # doctest: +SKIP
    >>> gpcnn.load_images(db, "fm.train", data.train)  # doctest: +SKIP
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]

    @property
    def train(self) -> ArrayImages:
        """The training split as an image source, with the class names (``load_images``'s ``x``)."""
        return ArrayImages(self.x_train, self.y_train, class_names=self.class_names)

    @property
    def test(self) -> ArrayImages:
        """The test split as an image source, with the class names."""
        return ArrayImages(self.x_test, self.y_test, class_names=self.class_names)


def missing_files(name: str, looked_at: list[str], hint: str) -> DatasetError:
    listing = "\n  ".join(looked_at)
    return DatasetError(f"{name} files not found; looked at:\n  {listing}\nTo get them, {hint}.")


def checked_pair(
    images: np.ndarray, labels: np.ndarray, n_classes: int, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """Check that images and labels agree in count and labels name a class."""
    if len(images) != len(labels):
        raise DatasetError(f"{source}: {len(images)} images but {len(labels)} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        bad = labels[(labels < 0) | (labels >= n_classes)][0]
        raise DatasetError(f"{source}: label {bad} is outside 0..{n_classes - 1}")
    return images, labels.astype(np.int64)
