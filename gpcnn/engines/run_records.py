"""The typed records the catalog returns: a run (``Run``), a run as ``list_runs`` shows it
(``RunSummary``), what a run stores of one part (``StoredPart``), a stored iteration
(``Checkpoint``) and one key's stored next start (``SegmentStart``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class Run:
    """A row of ``runs``, its parameters decoded."""

    run_id: int
    table: str
    params: dict
    result_key: str | None
    model_json: str
    status: str
    error: str | None


@dataclass(frozen=True)
class RunSummary:
    """One run as ``list_runs`` shows it."""

    run_id: int
    table: str
    status: str
    error: str | None
    params: dict
    created_at: datetime
    updated_at: datetime | None
    iterations: int  # rows in run_iterations
    checkpoints: int  # iterations whose checkpoint is kept
    stored_bytes: int


@dataclass(frozen=True)
class StoredPart:
    """What a run stores of one part: the iterations that keep it, chunks and bytes."""

    part: str
    iterations: list[int]
    chunks: int
    bytes: int


class Checkpoint(NamedTuple):
    """A stored iteration: part (``RUN_PARTS``) -> vector; the parts stored as None are absent."""

    iteration: int
    vectors: dict[str, np.ndarray]


class SegmentStart(NamedTuple):
    """One key's stored next start."""

    weights: np.ndarray
    optimizer: np.ndarray | None
