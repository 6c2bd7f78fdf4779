"""Errors from inside the database, told as where and why.

A plpython function that raises sends the server an error whose message is ``Type: message`` and
whose context is the Python traceback; ``segment_errors.on_segment`` puts the segment's key in front of
what the training functions raise (``SegmentError: segment 3: TypeError: ...``). On Greenplum the
message also names the segment that failed (``(seg1 slice1 10.0.0.5:6001 pid=1234)``), which the
engine reads (``engines.error_place``); MADlib's own functions move the segment's traceback into
DETAIL, which is read as well. A session whose server process ended (``pg_terminate_backend``,
the OOM killer, a restart) loses its connection with no error from the server: the client says so,
with the process id; one whose server's postmaster died (a failed Greenplum primary, whose mirror
takes over) is told as a failed segment. A statement ended by the server's ``statement_timeout`` is
named as such, with where that is set.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpcnn.engines import DatabaseError, ServerPlace, error_place
from gpcnn.engines.sessions import QUERY_CANCELED, SessionError

# SQLSTATEs of a server process ended from outside: admin_shutdown, crash_shutdown,
# cannot_connect_now (the server is starting or shutting down).
ENDED = ("57P01", "57P02", "57P03")
LOST_CONNECTION = "server closed the connection unexpectedly"
# What a statement meets when a Greenplum primary fails: its session's postmaster died under it,
# or the fault prober found the segment gone while the coordinator dispatched to it.
SEGMENT_FAILED = ("unexpected postmaster exit", "FTS detected")
NAMED_SEGMENT = re.compile(r"^(?:[\w.]+\.)?SegmentError: segment (-?\d+): (.*)$", re.S)
RAISED_AT = re.compile(r"\n\(raised at ([^\n]*)\)")
DISK_FULL = "53100"
STATEMENT_TIMEOUT = (
    "the server's statement_timeout ended it: it is set on the URL (options=-c statement_timeout=…), "
    "the role or the database (ALTER ROLE/DATABASE … SET statement_timeout); raise it above what "
    "one iteration lasts, or set 0"
)
FRAME = re.compile(r'^\s*(?:File "([^"]+)"|PL/Python function "([^"]+)"), line (\d+), in (\S+)')


class TrainingError(RuntimeError):
    """Training, evaluation or prediction failed; the message says where, why and what to do.

    Parameters
    ----------
    message : str
        Where (segment, host, pid), why (the Python exception and the line it came through) and
        what to do (e.g. ``fit(table, resume=7)``).
    segments : sequence of int, optional
        The keys of the segments it failed on, when known (``self.segments``).
    """

    def __init__(self, message: str, segments: Sequence[int] | None = None) -> None:
        super().__init__(message)
        self.segments = None if segments is None else [int(k) for k in segments]

    def continued(self, hint: str) -> TrainingError:
        """The same error with what to do next appended.

        Parameters
        ----------
        hint : str
            What to do next.

        Returns
        -------
        TrainingError
            A new error, on the same segments.
        """
        return TrainingError(f"{self}; {hint}", self.segments)


def database_call(what: str, call, *args, **kwargs):
    """``call(*args, **kwargs)``, with any database error turned into a ``TrainingError`` that
    says where (segment, Greenplum segment and host) and why (the Python exception raised in
    the database, or that the segment's server process ended)."""
    try:
        return call(*args, **kwargs)
    except SessionError as e:
        raise failure(what, e.error, e.params.get("group"), e.pid, e.lost, e.warning) from None
    except DatabaseError as e:
        assert e.orig is not None  # the driver's error, which SQLAlchemy's wraps
        raise failure(what, e.orig, lost=bool(e.connection_invalidated)) from None
    except Exception as e:
        if type(e).__module__.startswith("psycopg2"):
            raise failure(what, e) from None
        raise


def once_more_if_lost(call, *args):
    """``call(*args)``, and once more on a new connection if its connection was lost (its
    server process ended between the pool's ping and the statement): for idempotent work only,
    which a lost idle connection must not end."""
    try:
        return call(*args)
    except DatabaseError as e:
        if not e.connection_invalidated:
            raise
    return call(*args)


def failure(
    what: str,
    error: BaseException,
    keys: Sequence[int] | None = None,
    pid: int | None = None,
    lost: bool = False,
    warning: str | None = None,
) -> TrainingError:
    """The ``TrainingError`` of a driver error met while ``what`` ran on the segments ``keys``
    (those of the failed statement: one on PostgreSQL's per-segment sessions, all otherwise).
    ``warning``: what the server said last to a session it ended with no error of its own (the
    driver's is then "no message from the libpq")."""
    text = str(error).strip()
    diag = getattr(error, "diag", None)
    message = (getattr(diag, "message_primary", None) or text.split("\n")[0] or repr(error)).strip()
    message = warning or message
    details = "\n".join(filter(None, [getattr(diag, "message_detail", None), text]))
    context = "\n".join(filter(None, [getattr(diag, "context", None), details]))
    # The engine's mention of a server process first (Greenplum's suffix): it follows the
    # in-database code's "(raised at ...)" on its line.
    place, _ = error_place(f"{message}\n{details}")
    message = error_place(message)[1].strip()
    named = NAMED_SEGMENT.match(message)
    origin = ""
    if named:
        keys, message = [int(named.group(1))], named.group(2)
        raised_at = RAISED_AT.search(message)
        if raised_at:
            origin = f" (raised at {raised_at.group(1)})"
            message = RAISED_AT.sub("", message)
    where = _place(keys, place)
    if any(sign in message for sign in SEGMENT_FAILED):
        why = (
            f"its server failed under it ({message}): the segment (or server) failed; where it "
            "has a mirror, Greenplum's fault prober promotes the mirror within seconds "
            "(`gpcnn doctor` shows the mirrors and the prober's interval)"
        )
    elif lost or getattr(error, "pgcode", None) in ENDED or LOST_CONNECTION in text:
        process = f" (pid {pid})" if pid else ""
        why = (
            f"its server process{process} was terminated ({message}): something ended it "
            "from outside (pg_terminate_backend, the out-of-memory killer, a server restart)"
        )
    else:
        why = _shortened(message) + (origin or _frame(context))
    hint = ""
    if "No module named" in text or "plpython3u" in text:
        hint = " (run gpcnn.check_environment(engine) / `gpcnn doctor`)"
    elif getattr(error, "pgcode", None) == QUERY_CANCELED and "statement timeout" in text:
        hint = f" ({STATEMENT_TIMEOUT})"
    elif getattr(error, "pgcode", None) == DISK_FULL:
        hint = (
            " (the server's disk is full where that file lies: its tablespace's file system; "
            "free space there, and what was stored before stays resumable)"
        )
    return TrainingError(f"{what} failed in the database{where}: {why}{hint}", keys)


def _shortened(message: str, width: int = 300) -> str:
    """A long multi-line message (Keras puts a whole model config in its errors) as its first
    and last lines, each at most ``width`` characters."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    kept = lines[:1] + lines[-1:] if len(lines) > 1 else lines
    return " ... ".join(line if len(line) <= width else line[: width - 3] + "..." for line in kept)


def _place(keys: Sequence[int] | None, server: ServerPlace | None) -> str:
    parts = []
    if keys:
        label = "segment" if len(keys) == 1 else "segments"
        parts.append(f"{label} {', '.join(str(int(k)) for k in keys)}")
    if server:
        parts.append(str(server))
    return f" on {' / '.join(parts)}" if parts else ""


def _frame(context: str) -> str:
    """Where the in-database code raised: the innermost frame of its traceback."""
    frames = [m for m in map(FRAME.match, context.splitlines()) if m]
    if not frames:
        return ""
    path, function, line, name = frames[-1].groups()
    return f" (raised at {path or function}, line {line}, in {name})"
