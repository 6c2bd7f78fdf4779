"""Images in, segments out: check images, labels and ids, size the buffers, and deal the images to
the segments (IID shards, label skew, or whole groups of rows) in a seeded order, a shared sample
beside each shard if asked."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpcnn.data import pixels
from gpcnn.engines.identifiers import TableError
from gpcnn.kernel.segment import LABEL_DTYPE

IMAGES_PER_BUFFER_28x28 = 1_000
BUFFERS_PER_SEGMENT = 4  # aim for several buffers per segment when the data allows
ID_DTYPE = np.dtype("<i8")  # one id per image, as the user gave it (default: its input position)


def validate_images(
    x, y, num_classes: int | None = None, *, stacklevel: int = 2
) -> tuple[np.ndarray, np.ndarray, int]:
    """Return (images N×H×W×C or feature rows N×F, as ``pixels.stored`` keeps them; int32
    labels; number of classes), or raise TableError.

    ``stacklevel`` is the frame the warning about float images names (``warnings.warn``'s)."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim == 3:
        x = x[..., np.newaxis]
    if x.ndim not in (2, 4):
        raise TableError(
            f"images must be (N, H, W) or (N, H, W, C), or feature rows (N, F); got shape {x.shape}"
        )
    if 0 in x.shape[1:]:
        raise TableError(f"images of shape {x.shape[1:]} hold no pixels")
    x = pixels.stored(x, stacklevel=stacklevel + 1)
    if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
        raise TableError(f"labels must be a 1-D array of integers, got {y.dtype} {y.shape}")
    if len(x) != len(y):
        raise TableError(f"{len(x)} images but {len(y)} labels")
    if len(x) == 0:
        raise TableError("no images to load")
    if y.min() < 0:
        raise TableError(f"labels must be >= 0, found {y.min()}")
    if y.max() > np.iinfo(LABEL_DTYPE).max:  # stored as int32: it would wrap to another class
        raise TableError(f"label {y.max()} is larger than the int32 labels a table stores")
    classes = int(num_classes) if num_classes is not None else int(y.max()) + 1
    if y.max() >= classes:
        raise TableError(f"label {y.max()} is out of range for {classes} classes")
    return np.ascontiguousarray(x), y.astype(LABEL_DTYPE), classes


def default_buffer_size(n_images: int, segments: int, image_shape: Sequence[int]) -> int:
    """About 1,000 28×28 images (scaled by image size), several buffers per segment if possible."""
    base = max(1, round(IMAGES_PER_BUFFER_28x28 * 28 * 28 / math.prod(image_shape)))
    return max(1, min(base, math.ceil(n_images / (segments * BUFFERS_PER_SEGMENT))))


@dataclass(frozen=True)
class Buffer:
    key: int
    buffer_id: int
    start: int
    stop: int


def plan_buffers(
    n_images: int, keys: Sequence[int], buffer_size: int, counts: Sequence[int] | None = None
) -> list[Buffer]:
    """Contiguous shards of ``counts`` images each (default: counts differing by at most one
    image); each shard cut into nearly equal buffers of at most ``buffer_size``. ``buffer_id``
    follows the dealt order."""
    if n_images < len(keys):
        raise TableError(f"{n_images} images cannot fill {len(keys)} segments (one image each)")
    if counts is None:
        counts = [len(s) for s in np.array_split(np.arange(n_images), len(keys))]
    buffers: list[Buffer] = []
    start = 0
    for key, count in zip(keys, counts, strict=True):
        for piece in np.array_split(np.arange(count), math.ceil(count / buffer_size)):
            buffers.append(Buffer(key, len(buffers), start, start + len(piece)))
            start += len(piece)
    return buffers


DISTRIBUTIONS = ("iid", "label-skew")


def deal(y: np.ndarray, segments: int, seed: int, distribution: str = "iid", skew=None):
    """The order in which images are dealt (shard after shard) and each shard's size.

    ``iid``: one random permutation, shards of equal size. ``label-skew``: each class's images
    split among the segments in proportions drawn from Dirichlet(``skew``) (Hsu et al. 2019), so
    every segment has its own class mix and size; each shard is shuffled."""
    rng = np.random.default_rng(seed)
    if distribution == "iid":
        if skew is not None:
            raise TableError("skew applies to distribution='label-skew' only")
        order = rng.permutation(len(y))
        return order, [len(s) for s in np.array_split(order, segments)]
    if distribution != "label-skew":
        raise TableError(f"distribution={distribution!r}: choose one of {', '.join(DISTRIBUTIONS)}")
    if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 < skew < math.inf:
        raise TableError(
            f"label-skew needs skew = alpha > 0 (Dirichlet concentration), got {skew!r}"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(segments)]
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        cuts = np.round(
            np.cumsum(rng.dirichlet(np.full(segments, float(skew))))[:-1] * len(members)
        )
        for k, piece in enumerate(np.split(members, cuts.astype(int))):
            parts[k].append(piece)
    shards = [rng.permutation(np.concatenate(p)) for p in parts]
    empty = [k for k, shard in enumerate(shards) if len(shard) == 0]
    if empty:
        raise TableError(
            f"label-skew with alpha={skew} left segment {empty[0]} without images (seed {seed}): "
            "use a larger alpha, fewer segments or another seed"
        )
    return np.concatenate(shards), [len(s) for s in shards]


def deal_groups(groups: np.ndarray, segments: int, seed: int):
    """The order in which images are dealt and each shard's size, every group whole on one shard
    (as Greenplum's ``DISTRIBUTED BY`` keeps equal values together).

    ``groups``: each image's group, 0..G-1. The groups are visited in a random order from
    ``seed``, largest first (ties in that order), each to the shard with the fewest images so
    far; each shard is shuffled."""
    sizes = np.bincount(groups)
    if len(sizes) < segments:
        raise TableError(
            f"{len(sizes)} distinct values cannot give each of {segments} segments at least one: "
            "distribute by a column with more values, or use fewer segments"
        )
    rng = np.random.default_rng(seed)
    visit = rng.permutation(len(sizes))
    visit = visit[np.argsort(-sizes[visit], kind="stable")]
    shard_of, loads = np.empty(len(sizes), dtype=np.int64), [0] * segments
    for group in visit:
        k = loads.index(min(loads))
        shard_of[group] = k
        loads[k] += int(sizes[group])
    dealt = shard_of[groups]
    shards = [rng.permutation(np.flatnonzero(dealt == k)) for k in range(segments)]
    return np.concatenate(shards), [len(s) for s in shards]


SAMPLE_STREAM = 47  # the shared sample's random stream beside the dealing's: the shards stay


def check_shared_sample(fraction) -> float:
    """The shared sample's fraction of the table, 0 < p <= 0.5, or TableError."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TableError(f"shared_sample must be a fraction of the table, got {fraction!r}")
    if not 0 < fraction <= 0.5:
        raise TableError(
            f"shared_sample={fraction!r}: a fraction 0 < p <= 0.5 of the table (e.g. 0.05)"
        )
    return float(fraction)


def share_sample(order: np.ndarray, counts: Sequence[int], fraction: float, seed: int):
    """Every shard with its own images plus the same sample of ``fraction`` of them all, drawn
    from ``seed`` (its own stream: the shards are those dealt without it), shuffled in.

    Returns the new order (positions repeat: a sampled image is dealt once per shard, besides
    its own), the shards' sizes and the sample's positions, sorted."""
    rng = np.random.default_rng([seed, SAMPLE_STREAM])
    size = max(1, round(fraction * len(order)))
    sample = np.sort(rng.choice(len(order), size, replace=False))
    shards = np.split(order, np.cumsum(counts)[:-1])
    shards = [rng.permutation(np.concatenate([shard, sample])) for shard in shards]
    return np.concatenate(shards), [len(s) for s in shards], sample


def class_counts(y: np.ndarray, order: np.ndarray, counts: Sequence[int], classes: int):
    """Each segment's images per class, in dealing order."""
    bounds = np.cumsum([0, *counts])
    return [
        np.bincount(y[order[a:b]], minlength=classes).tolist()
        for a, b in itertools.pairwise(bounds)
    ]


def validate_ids(ids, count: int) -> np.ndarray:
    """One distinct integer id per image; by default the input position."""
    if ids is None:
        return np.arange(count, dtype=ID_DTYPE)
    ids = np.asarray(ids)
    if ids.shape != (count,) or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise TableError(
            f"ids must be {count} integers, one per image; got {ids.dtype} {ids.shape}"
        )
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != count:
        raise TableError(f"ids must be distinct: {unique[counts > 1][:5].tolist()} repeat")
    return ids.astype(ID_DTYPE)
