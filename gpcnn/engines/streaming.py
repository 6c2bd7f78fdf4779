"""The client's merge of K result streams (``StreamingAverage``): the database's
``merge_chunks`` done here, chunk by chunk, as the streams of a session per segment arrive.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Sequence

import numpy as np

from gpcnn.engines.results import Trained, segment_reports
from gpcnn.kernel import averaging, states

AVERAGE_NICENESS = 10  # the averaging thread: behind the segments (0), ahead of nice-19 jobs
AVERAGE_LEAD_CHUNKS = 2  # how far one stream may run ahead of the slowest before it waits
AVERAGE_QUEUE_CHUNKS = 1  # complete chunks waiting for the averaging thread before streams wait
AVERAGE_BLOCK_VALUES = averaging.BLOCK_VALUES  # averaged (and measured) at a time


class StreamingAverage:
    """The database's ``merge_chunks``, here, as the K result streams arrive (``BinaryRows`` sinks
    in K threads call ``add``): chunk i is averaged over the keys in the order of ``keys`` (shard
    order, as the database merges; ``averaging.weighted_average``: float64 sums, exact integer
    counts) once every key has sent it, and its K parts are dropped. So the client holds the
    average and a few chunks, not K trained vectors: with one key per stream (``paced``), a
    stream more than ``AVERAGE_LEAD_CHUNKS`` ahead of the slowest waits for it, and streams wait
    while ``AVERAGE_QUEUE_CHUNKS`` complete chunks await the averaging; a waiting stream's segment
    blocks on its socket, holding the vector it holds anyway. Unpaced (several keys per stream,
    sent one after the other) a stream cannot wait for a key that comes later in its own stream,
    so parts wait here. The averaging runs in one worker thread at a lower CPU priority
    (``AVERAGE_NICENESS``): on a machine whose cores the segments share, it must not slow the
    streams that feed it (measured by ``bench/client_merge.py``, in git history before ce358ee);
    not the lowest, so batch jobs do not starve it. A stream that ends without its trailer
    (``end_stream``) releases the others.
    ``into``: a vector to write the average into, when it has the average's size. ``on_chunk``:
    told each chunk of the average once it is whole (its index and a view of it), in order 0, 1,
    ... (a chunk is whole once every key sent it, and every key sends them in order), from the
    averaging thread: a checkpoint written while the streams still arrive. ``reference``: the
    start (its first values, the weights) the merged step is measured against, block by block
    as the average is written (before ``into`` is overwritten, which may be that start)."""

    def __init__(
        self,
        keys: Sequence[int],
        chunk_values: int,
        paced: bool = True,
        into: np.ndarray | None = None,
        on_chunk=None,
        reference: np.ndarray | None = None,
    ) -> None:
        self.keys = [int(k) for k in keys]
        self.chunk_values = chunk_values
        self.paced = paced
        self._into = into
        self._on_chunk = on_chunk
        self._reference = reference
        self._step2 = 0.0  # ||average - reference||^2 so far, in the averaging order
        self._progress = threading.Condition()
        self._received = dict.fromkeys(self.keys, 0)  # chunks received per key
        self._aborted = False
        self._states: dict[int, bytes] = {}
        self._counts: dict[int, int] = {}
        self._waiting: dict[int, dict[int, np.ndarray]] = {}
        self._complete: queue.Queue = queue.Queue(AVERAGE_QUEUE_CHUNKS)
        self._averaged = 0
        self._error: BaseException | None = None
        self.vector: np.ndarray | None = None
        self._worker = threading.Thread(target=self._average_complete, daemon=True)
        self._worker.start()

    def add(self, row: tuple) -> None:
        key, chunk, count, data = int(row[0]), int(row[1]), int(row[2]), row[3]
        with self._progress:
            self._counts[key] = count
            if chunk < 0:  # the small state, first in each stream, with the vector's size
                state = states.decode_state(data)
                if self.vector is None:
                    size, into = int(state["values"]), self._into
                    fits = into is not None and into.size == size and into.dtype == "<f4"
                    self.vector = into if fits else np.empty(size, dtype="<f4")
                self._states[key] = states.encode_state(state)
                return
            while (
                self.paced
                and not self._aborted
                and chunk - self._slowest(key) >= AVERAGE_LEAD_CHUNKS
            ):
                self._progress.wait()
            if self._aborted:
                return
            parts = self._waiting.setdefault(chunk, {})
            parts[key] = np.frombuffer(data, dtype="<f4")
            self._received[key] = chunk + 1
            self._progress.notify_all()
            if len(parts) < len(self.keys):
                return
            del self._waiting[chunk]
            item = (chunk, [parts[k] for k in self.keys], [self._counts[k] for k in self.keys])
        self._complete.put(item)  # waits while the averaging catches up

    def _slowest(self, key: int) -> int:
        """Chunks received from the slowest other key."""
        return min((n for k, n in self._received.items() if k != key), default=self._received[key])

    def end_stream(self, complete: bool) -> None:
        """One stream ended; one that broke off releases the streams waiting for it (the
        statement's error is raised by the sessions)."""
        if not complete:
            with self._progress:
                self._aborted = True
                self._progress.notify_all()

    def _average_complete(self) -> None:
        with contextlib.suppress(OSError):  # not on every platform; only speed depends on it
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), AVERAGE_NICENESS)
        while (item := self._complete.get()) is not None:
            chunk, parts, counts = item
            try:
                vector = self.vector
                assert vector is not None  # made by the state each stream sends before its chunks
                offset = chunk * self.chunk_values
                for start in range(0, parts[0].size, AVERAGE_BLOCK_VALUES):
                    block = [part[start : start + AVERAGE_BLOCK_VALUES] for part in parts]
                    average = averaging.weighted_average(block, counts)
                    self._measure(offset + start, average)
                    vector[offset + start : offset + start + average.size] = average
                    self._averaged += average.size
                if self._on_chunk is not None:
                    self._on_chunk(chunk, vector[offset : offset + parts[0].size])
            except BaseException as e:  # reported by result()
                self._error = e

    def _measure(self, offset: int, average: np.ndarray) -> None:
        """Add the block's part of the merged step, where it overlaps the reference."""
        if self._reference is None or offset >= self._reference.size:
            return
        stop = min(offset + average.size, self._reference.size)
        reference = self._reference[offset:stop]
        self._step2 = averaging.squared_distance(average[: stop - offset], reference, self._step2)

    def close(self) -> None:
        """Average what is complete and stop the worker (after the streams, whatever happened)."""
        self._complete.put(None)
        self._worker.join()

    def result(self) -> Trained:
        if self._error is not None:
            raise self._error
        if sorted(self._states) != sorted(self.keys) or self._waiting:
            raise ValueError(
                f"results of keys {sorted(self._states)} came back for keys {sorted(self.keys)}, "
                f"chunks {sorted(self._waiting)} incomplete"
            )
        # The vector and the merged state come from the keys' states, all here (checked above);
        # a fit always has keys.
        vector = self.vector
        assert vector is not None
        if self._averaged != vector.size:
            raise ValueError(f"{self._averaged} of the {vector.size} averaged values came back")
        state = None
        for key in self.keys:
            state = states.add_states(state, self._states[key])
        assert state is not None
        merged = states.decode_state(state)
        step2 = None if self._reference is None else self._step2
        return Trained(states.final_metrics(merged), vector, None, segment_reports(merged), step2)
