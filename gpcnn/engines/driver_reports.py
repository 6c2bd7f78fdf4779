"""What psycopg2 prints during a COPY, kept for the COPY's caller: the excepthook that stands in
for ``sys.excepthook`` while a thread of gpcnn's runs one (``driver_prints``), the server's error
found among the reports (``server_error``) and the rest printed once the COPY ended
(``print_unused``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

# What sys.excepthook holds (typeshed's signature).
ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


def is_driver_error(error: BaseException | None) -> bool:
    """Whether ``error`` is psycopg2's (the driver's), not gpcnn's or the stream's."""
    return error is not None and type(error).__module__.startswith("psycopg2")


# psycopg2 (2.9, pqpath.c: _pq_copy_out_v3 and _pq_copy_in_v3) reads every result a COPY ends with
# and raises each failed one. When the server ends the session mid-COPY with an error
# (pg_terminate_backend: FATAL "terminating connection due to administrator command", 57P01),
# libpq gives two: the server's, then its own "server closed the connection unexpectedly".
# Raising the second with the first still set makes its message's decoder fail ("SystemError:
# <function decode> returned a result with an exception set", caused by the first), which
# pq_raise prints with PyErr_Print, that is through sys.excepthook, and drops: a trace on stderr
# that looks like a crash in gpcnn, and the server's reason lost. So while a thread of gpcnn's is
# inside copy_expert, where only psycopg2's C code and gpcnn's own stream run, what reaches
# sys.excepthook from that thread is kept for ``copying.copy``: the server's error in it is the one
# raised, and anything else is printed as it would have been, once the COPY ended.

_copying = threading.local()  # .printed: the list a thread's running copy keeps reports in
_hook_lock = threading.Lock()
_hook_users = 0
# The sys.excepthook that keep_driver_prints stands in front of.
_hook_before: ExceptHook | None = None


def keep_driver_prints(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> None:
    """The stand-in for ``sys.excepthook``: a report from a thread inside a COPY is kept for it,
    any other goes to the hook that was in place."""
    printed = getattr(_copying, "printed", None)
    if printed is not None:
        printed.append(value)
        return
    (_hook_before or sys.__excepthook__)(kind, value, tb)


@contextlib.contextmanager
def driver_prints(printed: list[BaseException]) -> Iterator[None]:
    """Keep in ``printed`` what psycopg2 prints through sys.excepthook in this thread for the
    duration; the hook is in place while any thread runs a COPY, and put back after the last
    (unless someone replaced it meanwhile)."""
    global _hook_users, _hook_before
    with _hook_lock:
        if _hook_users == 0 and sys.excepthook is not keep_driver_prints:
            _hook_before, sys.excepthook = sys.excepthook, keep_driver_prints
        _hook_users += 1
    _copying.printed = printed
    try:
        yield
    finally:
        _copying.printed = None
        with _hook_lock:
            _hook_users -= 1
            if _hook_users == 0 and sys.excepthook is keep_driver_prints:
                # None only if keep_driver_prints was installed by someone else: then the
                # default hook, which is what keep_driver_prints itself falls back to.
                sys.excepthook, _hook_before = _hook_before or sys.__excepthook__, None


def server_error(printed: list[BaseException]) -> BaseException | None:
    """The first driver error in what psycopg2 printed (the server's, before libpq's own), taken
    out of ``printed`` so it is not printed as well."""
    for index, report in enumerate(printed):
        seen: set[int] = set()
        error: BaseException | None = report
        while error is not None and id(error) not in seen:
            if is_driver_error(error):
                del printed[index]
                return error
            seen.add(id(error))
            error = error.__cause__ or error.__context__
    return None


def print_unused(printed: list[BaseException]) -> None:
    """What psycopg2 printed that no error raised here carries: printed now, as it would have
    been (nothing is hidden)."""
    while printed:
        report = printed.pop(0)
        sys.excepthook(type(report), report, report.__traceback__)
