"""Keeps TensorFlow out of a server process that PostgreSQL's JIT compiler uses, and the JIT out of
one that holds TensorFlow: the two crash the server together (signal 11 in either order), and a
crashed server process restarts every session on the server.

``before_tensorflow`` refuses, with an error that says what to do, when the process already holds
the JIT's LLVM library, or when the session has ``jit`` on and the server has its provider;
``after_tensorflow`` turns ``jit`` off for the rest of the session. Outside the database (no
``plpy``) both do nothing. A segment of a Greenplum distributed query may not run SQL: there only
the process's own libraries are checked.
"""

from __future__ import annotations

import os

REFUSAL = (
    "gpcnn's functions do not start TensorFlow in a session where PostgreSQL's JIT compiler is on "
    "or has run: JIT (LLVM) and TensorFlow in one server process crash the server, ending every "
    "session on it. Run SET jit = off first, in a new session (gpcnn's own connections do); "
    "administrators can make JIT unavailable server-wide with jit_provider"
)
JIT_LIBRARY = "llvmjit"


def llvm_loaded(maps: str) -> bool:
    """Whether a process's memory map (``/proc/self/maps``) holds the JIT provider's library."""
    return any(JIT_LIBRARY in line for line in maps.splitlines())


def provider_path(maps: str, provider: str) -> str | None:
    """Where the server looks for the JIT provider ``provider``: beside ``plpython3.so`` (the
    server's library directory), as PostgreSQL does; None when that directory is not in ``maps``."""
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if os.path.basename(path).startswith("plpython3"):
            return os.path.join(os.path.dirname(path), provider + os.path.splitext(path)[1])
    return None


def refuses(jit_in_use: bool, maps: str) -> bool:
    """Whether TensorFlow must not start: the session may JIT-compile, or the process already did."""
    return jit_in_use or llvm_loaded(maps)


def before_tensorflow() -> None:
    """Raise ``RuntimeError(REFUSAL)`` where starting TensorFlow could crash the server."""
    plpy = _plpy()
    if plpy is None:
        return
    maps = _own_maps()
    if refuses(_jit_in_use(plpy, maps), maps):
        raise RuntimeError(REFUSAL)


def after_tensorflow() -> None:
    """``SET jit = off`` for the rest of the session, where this process may run SQL."""
    plpy = _plpy()
    if plpy is not None:
        _sql(plpy, "SET jit = off")


def _plpy():
    try:
        import plpy
    except ImportError:
        return None
    return plpy


def _jit_in_use(plpy, maps: str) -> bool:
    """``jit`` is on and its provider's library exists. Not ``pg_jit_available()``: asking it
    loads the library into this process, which is the crash itself."""
    rows = _sql(
        plpy,
        "SELECT pg_catalog.current_setting('jit') = 'on' AS on, "
        "pg_catalog.current_setting('jit_provider') AS provider",
    )
    if not rows or not rows[0]["on"]:
        return False
    path = provider_path(maps, rows[0]["provider"])
    return path is None or os.path.exists(path)


def _sql(plpy, statement: str):
    """The statement's rows, or None where this process may not run SQL (a Greenplum segment
    inside a distributed query): a subtransaction keeps the refusal from failing the query."""
    try:
        with plpy.subtransaction():
            return plpy.execute(statement)
    except plpy.SPIError:
        return None


def _own_maps() -> str:
    try:
        with open("/proc/self/maps") as maps:
            return maps.read()
    except OSError:  # not Linux: the setting alone decides
        return ""
