"""Reader of image folders: one sub-folder of PNG and JPEG images per class, listed at once but
decoded only batch by batch (``ImageFolder``, an image source), for folders too large to hold."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from gpcnn.data.labelled import DatasetError
from gpcnn.data.sources import ImageSource

IMAGE_FOLDER_EXTENSIONS = (".png", ".jpg", ".jpeg")
IMAGE_FOLDER_COLORS = ("rgb", "gray")


@dataclass(frozen=True)
class ImageFolder(ImageSource):
    """A folder of class sub-folders of images, listed but not yet decoded: an image source.

    ``files`` holds every image as (path, label) in the shuffled order that ``batches`` and
    ``to_arrays`` follow; a label is the index of its class in ``class_names``. Nothing is
    decoded until ``batches`` is iterated. Build one with ``load_image_folder``.

    Parameters
    ----------
    path : Path
        The folder.
    class_names : tuple of str
        The class sub-folders' names, sorted.
    files : tuple of (Path, int)
        Every image file and its label, in loading order.
    image_shape : tuple of int
        (H, W, C) every image is resized and converted to.
    color : {"rgb", "gray"}, default "rgb"
        The conversion: three channels or one.
    batch_size : int, default 1024
        Images decoded per batch when none is given to ``batches``.
    """

    what: ClassVar[str] = "an image folder"

    path: Path
    class_names: tuple[str, ...]
    files: tuple[tuple[Path, int], ...] = field(repr=False)  # can be millions long
    image_shape: tuple[int, int, int]
    color: str = "rgb"
    batch_size: int = 1024

    def __len__(self) -> int:
        return len(self.files)

    @property
    def labels(self) -> np.ndarray:
        """Every image's label, in loading order."""
        return np.array([label for _, label in self.files], dtype=np.int64)

    @property
    def ids(self) -> np.ndarray:
        """Each file's position in the sorted listing, so that a file keeps its id whatever the
        shuffle."""
        ranks = {path: i for i, path in enumerate(sorted(p for p, _ in self.files))}
        return np.array([ranks[p] for p, _ in self.files])

    def batches(
        self, batch_size: int | None = None, *, progress: bool = True
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Decode the images in order, yielding (x, y) for at most ``batch_size`` at a time
        (default: the folder's ``batch_size``).

        x is a uint8 array (n, H, W, C) and y the int64 labels. Only the batch being filled is
        held here, so memory stays bounded by one batch however large the folder (plus what the
        caller keeps). A file that Pillow cannot decode raises DatasetError naming it, when
        its batch is reached.

        Parameters
        ----------
        batch_size : int, optional
            Images per batch (default: the folder's ``batch_size``).
        progress : bool, default True
            Show a tqdm bar over the files.

        Yields
        ------
        tuple of ndarray
            ``(x, y)``: uint8 images (n, H, W, C) and their int64 labels.
        """
        from tqdm.auto import tqdm

        with tqdm(
            total=len(self.files),
            unit="file",
            desc=f"reading {self.path.name or self.path}",
            disable=not progress,
            leave=False,
        ) as bar:
            step = self.batch_size if batch_size is None else int(batch_size)
            for start in range(0, len(self.files), step):
                batch = self.files[start : start + step]
                x = np.empty((len(batch), *self.image_shape), np.uint8)
                for row, (file, _) in enumerate(batch):
                    x[row] = _decode_image(file, self.image_shape, self.color)
                    bar.update(1)
                y = np.fromiter((label for _, label in batch), np.int64, len(batch))
                yield x, y
                del x, y  # drop this batch before the next one is allocated

    def to_arrays(self, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Decode every image at once: only for folders that fit in memory.

        Parameters
        ----------
        progress : bool, default True
            Show a tqdm bar over the files.

        Returns
        -------
        tuple of ndarray
            ``(x, y)``: uint8 images (N, H, W, C) and their int64 labels.
        """
        x = np.empty((len(self.files), *self.image_shape), np.uint8)
        y = np.empty(len(self.files), np.int64)
        start = 0
        for x_batch, y_batch in self.batches(progress=progress):
            x[start : start + len(x_batch)] = x_batch
            y[start : start + len(y_batch)] = y_batch
            start += len(x_batch)
        return x, y


def load_image_folder(
    path: str | os.PathLike[str],
    size: tuple[int, int],
    color: str = "rgb",
    *,
    seed: int = 0,
    batch_size: int = 1024,
) -> ImageFolder:
    """List a folder of PNG and JPEG images, one sub-folder per class, without decoding them.

    ``path`` holds one sub-folder per class: the class names are the sub-folder names, sorted,
    and an image's label is its class's index in that order. Each class folder's images are
    the files directly inside it whose names end in .png, .jpg or .jpeg (in any case); they
    are opened as PNG or JPEG only, whatever the extension says. Other files are ignored, as
    are sub-folders inside a class folder (their images are not read), files lying directly
    in ``path``, and every file or folder whose name starts with ".". At least two classes
    are needed, each with at least one image.

    The list is sorted, then shuffled with ``np.random.default_rng(seed)``, so the order
    depends on ``seed`` alone. Images are decoded only when ``ImageFolder.batches`` is
    iterated: each is converted with Pillow to RGB (``color="rgb"``, C = 3; an alpha channel
    is dropped, not composited) or to 8-bit grayscale (``color="gray"``, mode L, C = 1), then
    resized to exactly ``size`` = (H, W) with ``Image.Resampling.BILINEAR``. The aspect ratio
    is not kept: images of another shape are stretched. EXIF orientation is not applied.

    Parameters
    ----------
    path : str or path-like
        The folder of class sub-folders.
    size : tuple of int
        (H, W) every image is resized to.
    color : {"rgb", "gray"}, default "rgb"
        Three channels, or one (8-bit grayscale).
    seed : int, default 0
        The shuffle of the listing.
    batch_size : int, default 1024
        Images decoded at a time while loading.

    Returns
    -------
    ImageFolder
        An image source (``gpcnn.load_images(db, table, folder)``).

    Raises
    ------
    DatasetError
        For a missing folder, fewer than two classes, a class without images, or a bad ``size``
        or ``color``.

    Examples
    --------
    >>> folder = datasets.load_image_folder("pets/", size=(64, 64), color="rgb")
    >>> gpcnn.load_images(db, "pets.train", folder)  # doctest: +SKIP
    """
    height, width = _image_size(size)
    if color not in IMAGE_FOLDER_COLORS:
        raise DatasetError(f"color must be one of {IMAGE_FOLDER_COLORS}, not {color!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise DatasetError(f"batch_size must be a positive integer, not {batch_size!r}")
    if batch_size < 1:
        raise DatasetError(f"batch_size must be a positive integer, not {batch_size}")
    path = Path(path)
    class_names, listed = _list_image_folder(path)
    order = np.random.default_rng(seed).permutation(len(listed))
    return ImageFolder(
        path=path,
        class_names=class_names,
        files=tuple(listed[i] for i in order),
        image_shape=(height, width, 3 if color == "rgb" else 1),
        color=color,
        batch_size=int(batch_size),
    )


def _image_size(size: object) -> tuple[int, int]:
    """Check that size is (H, W): two positive integers."""
    if (
        isinstance(size, str | bytes)
        or not isinstance(size, Iterable)
        or not isinstance(size, Sized)
        or len(size) != 2
        or not all(
            isinstance(side, int | np.integer) and not isinstance(side, bool) and side > 0
            for side in size
        )
    ):
        raise DatasetError(f"size must be (height, width), two positive integers, not {size!r}")
    height, width = size
    return int(height), int(width)


def _visible(entries: Iterator[Path]) -> list[Path]:
    return sorted(entry for entry in entries if not entry.name.startswith("."))


def _list_image_folder(path: Path) -> tuple[tuple[str, ...], list[tuple[Path, int]]]:
    """Class names and every (image file, label), sorted by class then file name."""
    if not path.exists():
        raise DatasetError(f"{path}: no such folder (expected one sub-folder of images per class)")
    if not path.is_dir():
        raise DatasetError(f"{path}: not a folder (expected one sub-folder of images per class)")
    try:
        class_dirs = [entry for entry in _visible(path.iterdir()) if entry.is_dir()]
        if not class_dirs:
            raise DatasetError(
                f"{path}: no class sub-folders; put each class's PNG or JPEG images in a "
                "sub-folder named after the class"
            )
        if len(class_dirs) == 1:
            raise DatasetError(
                f"{path}: only one class sub-folder ({class_dirs[0].name!r}); a classifier "
                "needs at least two"
            )
        listed: list[tuple[Path, int]] = []
        for label, class_dir in enumerate(class_dirs):
            images = [
                entry
                for entry in _visible(class_dir.iterdir())
                if entry.suffix.lower() in IMAGE_FOLDER_EXTENSIONS and entry.is_file()
            ]
            if not images:
                raise DatasetError(
                    f"{class_dir}: class {class_dir.name!r} has no images (files ending in "
                    f"{', '.join(IMAGE_FOLDER_EXTENSIONS)} directly in its folder)"
                )
            listed += [(image, label) for image in images]
    except OSError as exc:
        raise DatasetError(f"{path}: cannot list the image folder ({exc})") from exc
    return tuple(entry.name for entry in class_dirs), listed


def _decode_image(file: Path, shape: tuple[int, int, int], color: str) -> np.ndarray:
    """One image as a uint8 array of ``shape`` (H, W, C), converted and resized by Pillow."""
    from PIL import Image  # imported here: only the image-folder reader needs Pillow

    height, width, channels = shape
    try:
        with Image.open(file, formats=("PNG", "JPEG")) as image:
            converted = image.convert("RGB" if color == "rgb" else "L")
        resized = converted.resize((width, height), Image.Resampling.BILINEAR)  # PIL: (W, H)
        pixels = np.asarray(resized, np.uint8)
    except Exception as exc:  # a corrupt image can fail with almost any exception type
        raise DatasetError(f"{file}: cannot decode as a PNG or JPEG image ({exc})") from exc
    return pixels.reshape(height, width, channels)
