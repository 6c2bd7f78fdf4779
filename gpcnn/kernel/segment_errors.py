"""What a segment raises, and how it reaches the client: ``SegmentError`` and ``on_segment``,
which names the segment and the line of gpcnn's code an error came through."""

from __future__ import annotations

import os
import traceback


class SegmentError(RuntimeError):
    """Raised inside the database; the message reaches the client in the SQL error."""


def on_segment(key: int, function, *args):
    """``function(*args)`` for segment ``key``: what it raises reaches the client as
    ``SegmentError: segment <key>: <type>: <message>`` and the line of gpcnn's code it came
    through (the client's ``gpcnn.errors`` reads them back), whatever the dispatch."""
    try:
        return function(*args)
    except Exception as e:
        what = str(e) if isinstance(e, SegmentError) else f"{type(e).__name__}: {e}"
        raise SegmentError(f"segment {key}: {what}\n(raised at {_origin(e)})") from e


def _origin(error: BaseException) -> str:
    """The innermost frame of gpcnn's code (else of any code) in the error's traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if os.path.basename(os.path.dirname(f.filename)) == "gpcnn"]
    frame = (ours or frames)[-1]
    path = f"gpcnn/{os.path.basename(frame.filename)}" if ours else frame.filename
    return f"{path}, line {frame.lineno}, in {frame.name}"
