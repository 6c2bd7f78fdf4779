"""The image source: what ``load_images`` reads, whatever holds the images (arrays, a folder, files).

A reader is one class implementing ``ImageSource``: its image shape, class names, labels and count,
and ``batches`` that decode the images in order. ``ArrayImages`` is the source of images already in
memory; ``as_source`` turns ``load_images``'s input into a source, once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from gpcnn.data.array_checks import class_values
from gpcnn.data.dealing import deal, validate_images
from gpcnn.engines.identifiers import TableError

Batch = tuple[np.ndarray, np.ndarray]  # uint8 images (n, H, W, C) and their integer labels


class ImageSource(ABC):
    """Labelled images of one shape, read in order batch by batch.

    A subclass gives ``image_shape`` (H, W, C) and ``class_names`` (None: unnamed classes, then
    ``num_classes`` too), and implements ``__len__``, ``labels`` and ``batches``. It may name its
    images (``ids``) and their files (``files``). A source read front to back is taken to be in
    random order already: it loads IID, in its own order. A source that can read any image at once
    (``ArrayImages``) overrides ``deal`` and ``pieces`` to deal a seeded shuffle instead.
    """

    what: ClassVar[str] = "an image source"  # for messages
    image_shape: tuple[int, ...]
    class_names: tuple[str, ...] | None
    files: Sequence[tuple[Path, int]] | None = None  # every image's (file, label), if it has one
    itemsize: int = 1  # bytes a table stores per value: uint8 pixels (float32 feature rows: 4)

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    @abstractmethod
    def labels(self) -> np.ndarray:
        """Every image's class index, in the source's order."""

    @abstractmethod
    def batches(self, batch_size: int | None = None, *, progress: bool = True) -> Iterator[Batch]:
        """The images and labels in order, at most ``batch_size`` at a time.

        Parameters
        ----------
        batch_size : int, optional
            Images per batch (default: the source's own).
        progress : bool, default True
            Show a progress bar, where the source has one.

        Yields
        ------
        x : ndarray
            The batch's uint8 images (n, H, W, C), or float32 feature rows (n, F).
        y : ndarray
            Their integer class indices.
        """

    @property
    def num_classes(self) -> int:
        """The number of classes: one per class name."""
        assert self.class_names is not None  # a source without names gives num_classes itself
        return len(self.class_names)

    @property
    def ids(self) -> np.ndarray | None:
        """Every image's id, or None for its position."""
        return None

    def deal(
        self, segments: int, seed: int, distribution: str = "iid", skew: float | None = None
    ) -> tuple[np.ndarray, list[int]]:
        """The order in which the images go to the segments, and each segment's count.

        Here the source's own order in equal shards: a source read front to back loads IID.

        Parameters
        ----------
        segments : int
            The number of segments to deal to.
        seed : int
            Not used here (the source's order is already random); a source that deals a seeded
            shuffle uses it.
        distribution : {"iid"}, default "iid"
            Only ``"iid"``.
        skew : float, optional
            Not used here.

        Returns
        -------
        order : ndarray of int
            The positions of the images in the order they are dealt, shard after shard.
        sizes : list of int
            Each segment's number of images.

        Raises
        ------
        TableError
            A ``distribution`` other than ``"iid"``.
        """
        if distribution != "iid":
            raise TableError(f"{self.what} loads IID (its files are shuffled): no label-skew")
        order = np.arange(len(self))
        return order, [len(s) for s in np.array_split(order, segments)]

    def pieces(self, order: np.ndarray, sizes: Sequence[int], *, progress: bool) -> Iterator[Batch]:
        """Consecutive pieces of ``sizes`` images, in ``order``, cut from the batches.

        At most one batch and one piece are in memory at a time.

        Parameters
        ----------
        order : ndarray of int
            ``deal``'s order; here the source's own, so it is not read.
        sizes : sequence of int
            The number of images of each piece (``deal``'s sizes), in turn.
        progress : bool
            Show the progress bar of ``batches``.

        Yields
        ------
        x : ndarray
            The piece's images (uint8) or feature rows.
        y : ndarray
            Their class indices.
        """
        pending_x: list[np.ndarray] = []
        pending_y: list[np.ndarray] = []
        have = 0
        batches = self.batches(progress=progress)
        for need in sizes:
            while have < need:
                cx, cy = next(batches)
                pending_x.append(np.asarray(cx, np.uint8))
                pending_y.append(np.asarray(cy))
                have += len(cy)
            x, y = np.concatenate(pending_x), np.concatenate(pending_y)
            pending_x, pending_y, have = [x[need:]], [y[need:]], have - need
            yield x[:need], y[:need]


class ArrayImages(ImageSource):
    """Images or feature rows held in memory, with their labels, as an image source.

    ``load_images`` wraps arrays in one; ``Dataset.train`` and ``Dataset.test`` return one. The
    arrays are checked and converted at once (``validate_images``): images become uint8
    N×H×W×C, feature rows float32 N×F, labels int32. Labels that are names (strings, objects)
    map to their sorted distinct values, which become the class names, as ``pack_table`` maps a
    table's (``arrays.class_values``).

    Parameters
    ----------
    x : array-like
        Images (N, H, W) or (N, H, W, C) of integers 0..255 or floats in [0, 1] (stored as
        uint8, rounded, with a warning), or feature rows (N, F) (floats stored as float32);
        ``gpcnn.data.pixels`` states the rule.
    y : array-like
        One label per image: class indices 0..classes-1, or names.
    num_classes : int, optional
        The number of classes (default: ``len(class_names)``, else the largest label + 1).
    class_names : sequence, optional
        A name per class, in class order.

    Raises
    ------
    TableError
        Images or labels of the wrong shape, type or range, a different number of images and
        labels, no images, or ``num_classes`` that disagrees with ``class_names``.

    Examples
    --------
    >>> from gpcnn.datasets import ArrayImages
    >>> source = ArrayImages(x, ["cat", "dog", "cat"])  # doctest: +SKIP
    >>> source.class_names, source.labels  # doctest: +SKIP
    (('cat', 'dog'), array([0, 1, 0], dtype=int32))
    """

    what = "arrays"

    def __init__(self, x, y, num_classes: int | None = None, class_names=None) -> None:
        if class_names is not None and num_classes is not None and num_classes != len(class_names):
            raise TableError(f"{len(class_names)} class names for {num_classes} classes")
        y = np.asarray(y)
        if class_names is None and y.dtype.kind in "USO":  # names, not class indices
            class_names, y = class_values(y)
        names = None if class_names is None else tuple(str(c) for c in class_names)
        self.x, self.y, self._classes = validate_images(
            x, y, num_classes if names is None else len(names), stacklevel=5
        )
        self.image_shape = self.x.shape[1:]
        self.itemsize = self.x.dtype.itemsize
        self.class_names = names

    def __len__(self) -> int:
        return len(self.x)

    @property
    def labels(self) -> np.ndarray:
        """Every image's class index (int32), in the arrays' order."""
        return self.y

    @property
    def num_classes(self) -> int:
        """The number of classes, given or found from the labels."""
        return self._classes

    def batches(self, batch_size: int | None = None, *, progress: bool = True) -> Iterator[Batch]:
        """The images and labels in order, at most ``batch_size`` at a time.

        Parameters
        ----------
        batch_size : int, optional
            Images per batch (default: all of them in one batch).
        progress : bool, default True
            Not used: arrays show no progress bar.

        Yields
        ------
        x : ndarray
            A slice of the stored images (uint8) or feature rows (float32).
        y : ndarray
            Their int32 class indices.
        """
        step = len(self) if batch_size is None else int(batch_size)
        for start in range(0, len(self), step):
            yield self.x[start : start + step], self.y[start : start + step]

    def deal(
        self, segments: int, seed: int, distribution: str = "iid", skew: float | None = None
    ) -> tuple[np.ndarray, list[int]]:
        """A seeded shuffle, dealt IID or with label skew (``dealing.deal``).

        Parameters
        ----------
        segments : int
            The number of segments to deal to.
        seed : int
            The shuffle's seed.
        distribution : {"iid", "label-skew"}, default "iid"
            ``"iid"``: one random permutation in equal shards. ``"label-skew"``: each class's
            images split among the segments in proportions drawn from Dirichlet(``skew``)
            (Hsu et al. 2019), so every segment has its own class mix and size.
        skew : float, optional
            The Dirichlet concentration alpha > 0 for ``"label-skew"`` (only there).

        Returns
        -------
        order : ndarray of int
            The positions of the images in the order they are dealt, shard after shard.
        sizes : list of int
            Each segment's number of images.

        Raises
        ------
        TableError
            An unknown ``distribution``, ``skew`` with ``"iid"``, a ``skew`` that is not a
            positive number, or a label-skew draw that leaves a segment without images.
        """
        return deal(self.y, segments, seed, distribution, skew)

    def pieces(self, order: np.ndarray, sizes: Sequence[int], *, progress: bool) -> Iterator[Batch]:
        """Consecutive pieces of ``sizes`` images, gathered through ``order``.

        Each piece's images are gathered into one scratch array, so that loading never
        materialises a shuffled copy of the whole data set: a piece is valid until the next one.

        Parameters
        ----------
        order : ndarray of int
            The positions of the images in dealing order (``deal``'s).
        sizes : sequence of int
            The number of images of each piece (``deal``'s sizes), in turn.
        progress : bool
            Not used: arrays show no progress bar.

        Yields
        ------
        x : ndarray
            The piece's images or feature rows, a view of the scratch array.
        y : ndarray
            Their class indices.
        """
        scratch = np.empty((max(sizes), *self.x.shape[1:]), dtype=self.x.dtype)
        start = 0
        for n in sizes:
            idx = order[start : start + n]
            start += n
            yield np.take(self.x, idx, axis=0, out=scratch[:n], mode="clip"), self.y[idx]


def as_source(x, y=None, *, num_classes: int | None = None, class_names=None) -> ImageSource:
    """``x`` itself when it is an image source (which carries its labels), else ``ArrayImages``."""
    if isinstance(x, ImageSource):
        if y is not None:
            raise TableError(f"{x.what} carries its labels: pass y=None")
        return x
    return ArrayImages(x, y, num_classes, class_names)
