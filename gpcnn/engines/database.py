"""The connection handle: one per (server, schema, dispatch, engine), cached, picklable, closed once.

Everything in gpcnn takes a ``Database`` — never a SQLAlchemy engine, a backend and a schema side by
side. The engine is detected once, on first use, among the registered ones (``engine_registry``), unless
the handle names one (``engine_name``). Pickling keeps the URL without its password;
an unpickled handle takes the password again from ``$GPCNN_DATABASE_URL``,
``$GPCNN_TEST_DATABASE_URL`` or the embedded cluster when they name the same server and user, else
libpq finds it (``$PGPASSWORD``, ``~/.pgpass``).
"""

from __future__ import annotations

import os
import threading
from functools import cached_property
from typing import Protocol

import sqlalchemy as sa

from gpcnn.engines import engine_registry
from gpcnn.engines.backend import Backend, check_chunk_bytes
from gpcnn.engines.sessions import POOL, connect_arguments

DEFAULT_SCHEMA = "gpcnn"

_open: dict[tuple[str, str, str | None, int | None, str | None], Database] = {}
_open_lock = threading.Lock()


class DefaultServer(Protocol):
    """Where ``connect()`` goes when given no URL and ``$GPCNN_DATABASE_URL`` is unset."""

    def url(self) -> str:
        """The server's URL, started if needed."""

    def configured_url(self) -> str | None:
        """Its URL if it exists, without starting anything (to find a pickled handle's password)."""


_default_server: DefaultServer | None = None


def register_default_server(server: DefaultServer) -> None:
    """Set the server of ``connect()`` without a URL: the embedded cluster registers itself when
    ``gpcnn`` is imported, so this layer never imports the tools above it."""
    global _default_server
    _default_server = server


def _default() -> DefaultServer:
    if _default_server is None:
        raise RuntimeError(
            "no database URL: pass one to gpcnn.connect(url) or set GPCNN_DATABASE_URL"
        )
    return _default_server


def _driver_url(url: str | sa.URL) -> sa.URL:
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres", "greenplum"):
        parsed = parsed.set(drivername="postgresql+psycopg2")
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(
            f"{parsed.render_as_string(hide_password=True)} is a {parsed.get_backend_name()} URL: "
            "gpcnn runs on PostgreSQL, Greenplum and Cloudberry (postgresql://user@host:port/db)"
        )
    return parsed


class UnreachableError(sa.exc.OperationalError):
    """The server of a handle cannot be reached: the driver's error, told with the URL (no
    password), where that URL came from and what to run. A ``DatabaseError`` like any other."""

    def __init__(self, error: sa.exc.DBAPIError, url: sa.URL, origin: str) -> None:
        driver = error.orig if error.orig is not None else error  # the driver's, when it gave one
        super().__init__(error.statement, error.params, driver)
        reason = str(driver).strip().splitlines()[0]
        embedded = origin == "the embedded cluster"
        start = "start it with `gpcnn db start`" if embedded else "check that the server runs"
        self.advice = (
            f"cannot reach the database {url.render_as_string(hide_password=True)} ({origin}): "
            f"{reason}; {start} (`gpcnn doctor` checks it), or set GPCNN_DATABASE_URL or pass a "
            "URL to use another"
        )

    def __str__(self) -> str:
        return self.advice


def _same_login(a: sa.URL, b: sa.URL) -> bool:
    def login(u: sa.URL) -> tuple:
        return (u.host or "", u.port or 5432, u.username, u.database)

    return login(a) == login(b)


def _known_password(url: sa.URL) -> str | None:
    """The password of a URL pickled without it, from where gpcnn found it the first time."""
    candidates = [os.environ.get("GPCNN_DATABASE_URL"), os.environ.get("GPCNN_TEST_DATABASE_URL")]
    if _default_server is not None:
        candidates.append(_default_server.configured_url())
    for candidate in candidates:
        if candidate and _same_login(sa.make_url(candidate), url):
            return sa.make_url(candidate).password
    return None


class Database:
    """A database gpcnn runs on: its URL, gpcnn's schema there, its engine and dispatch.

    Use ``gpcnn.connect``, which returns the same handle for the same arguments; constructing one
    directly makes a handle outside that cache. Nothing connects until first use. A handle
    pickles without its password: an unpickled one takes it from ``$GPCNN_DATABASE_URL``,
    ``$GPCNN_TEST_DATABASE_URL`` or the embedded cluster when they name the same server and
    user, else libpq finds it (``$PGPASSWORD``, ``~/.pgpass``). ``close()`` or the end of a
    ``with`` block disposes its connections.

    Parameters
    ----------
    url : str or sqlalchemy.URL
        A PostgreSQL or Greenplum URL; a ``postgresql``, ``postgres`` or ``greenplum`` driver
        name becomes ``postgresql+psycopg2``.
    schema : str, default "gpcnn"
        The schema of gpcnn's functions, runs and catalog.
    dispatch : str, optional
        How iterations reach the segments: None, the engine's own way; ``"statement"`` runs
        PostgreSQL iterations exactly as Greenplum does, one statement for all segments in one
        session; or another mode a registered engine accepts.
    chunk_bytes : int, optional
        The chunk size of the vectors sent and stored, a positive multiple of 8 of at most
        256 MiB (default 1 MiB).
    engine_name : str, optional
        The registered engine that serves it (``gpcnn.engines.register_engine``); None: the one
        that detects the server, asked on first use.

    Raises
    ------
    ValueError
        A ``dispatch`` no registered engine accepts, an ``engine_name`` no engine has, an empty
        ``schema``, or a bad ``chunk_bytes``.

    Examples
    --------
    >>> with gpcnn.connect("postgresql://gpadmin@mdw:5432/gpdb") as db:  # doctest: +SKIP
    ...     print(db.kind)
    greenplum
    """

    def __init__(
        self,
        url: str | sa.URL,
        schema: str = DEFAULT_SCHEMA,
        dispatch: str | None = None,
        chunk_bytes: int | None = None,
        engine_name: str | None = None,
    ) -> None:
        if dispatch not in engine_registry.dispatch_names():
            raise ValueError(
                f"dispatch={dispatch!r}: choose one of {engine_registry.dispatch_names()}"
            )
        if engine_name is not None:
            engine_registry.named_engine(
                engine_name
            )  # a name no engine has fails here, not on first use
        if not isinstance(schema, str) or not schema:
            raise ValueError(f"schema must be a non-empty name, got {schema!r}")
        self.url = _driver_url(url)
        self.schema = schema
        self.dispatch = dispatch
        self.chunk_bytes = None if chunk_bytes is None else check_chunk_bytes(chunk_bytes)
        self.engine_name = engine_name
        self.closed = False
        self.origin = "the URL given"  # where the URL came from, for errors (``connect`` says)

    @cached_property
    def engine(self) -> sa.Engine:
        if self.closed:
            raise RuntimeError(f"{self!r} is closed: gpcnn.connect() opens it again")
        engine = sa.create_engine(
            self.url, pool_pre_ping=True, connect_args=connect_arguments(self.url)
        )
        sa.event.listen(engine, "handle_error", self._unreachable)
        return engine

    def _unreachable(self, context: sa.engine.ExceptionContext) -> Exception | None:
        """A connection that could not be opened, told as ``UnreachableError``."""
        error = context.sqlalchemy_exception
        # not a pooled connection found dead by the pre-ping: the pool opens a new one then
        opening = context.connection is None and not context.is_pre_ping
        if opening and isinstance(error, sa.exc.OperationalError):
            return UnreachableError(error, self.url, self.origin)
        return None

    @cached_property
    def backend(self) -> Backend:
        """The engine's backend: the one named, else the one that detects the server (asked once)."""
        if self.engine_name is not None:
            cls = engine_registry.named_engine(self.engine_name)
        else:
            with self.engine.connect() as conn:
                facts = conn.execute(sa.text(engine_registry.SERVER_FACTS_SQL)).one()
            cls = engine_registry.detected_engine(engine_registry.ServerFacts(*facts))
        return cls(self.engine, self.schema, self.dispatch, self.chunk_bytes)

    @property
    def kind(self) -> str:
        """The engine kind serving the database, such as ``"postgresql"`` or ``"greenplum"``.

        Detecting it connects once, unless the handle names ``engine_name``.
        """
        return self.backend.kind

    def connect(self) -> sa.Connection:
        """A connection from the handle's SQLAlchemy pool.

        Returns
        -------
        sqlalchemy.Connection
            Use it in a ``with`` block, which returns it to the pool.

        Raises
        ------
        RuntimeError
            The handle is closed.
        """
        return self.engine.connect()

    def begin(self):
        """A connection from the pool inside a transaction.

        Returns
        -------
        context manager of sqlalchemy.Connection
            As ``sqlalchemy.Engine.begin``: ``with db.begin() as conn:`` commits when the block
            ends and rolls back on an error.

        Raises
        ------
        RuntimeError
            The handle is closed.
        """
        return self.engine.begin()

    def close(self) -> None:
        """Dispose the connection pool and the idle segment sessions of this server; the handle
        is dropped from ``connect``'s cache, so the next ``connect`` opens a new one."""
        with _open_lock:
            for key, db in list(_open.items()):
                if db is self:
                    del _open[key]
        if "engine" in self.__dict__:
            POOL.clear(self.engine)
            self.engine.dispose()
            del self.__dict__["engine"]
        self.__dict__.pop("backend", None)
        self.closed = True

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {
            "url": self.url._replace(password=None).render_as_string(hide_password=False),
            "schema": self.schema,
            "dispatch": self.dispatch,
            "chunk_bytes": self.chunk_bytes,
            "engine_name": self.engine_name,
        }

    def __setstate__(self, state: dict) -> None:
        url = _driver_url(state["url"])
        password = _known_password(url)
        if password is not None:
            url = url.set(password=password)
        type(self).__init__(
            self,
            url,
            state["schema"],
            state["dispatch"],
            state.get("chunk_bytes"),
            state.get("engine_name"),
        )

    def __repr__(self) -> str:
        shown = self.url.render_as_string(hide_password=True)
        extra = f", dispatch={self.dispatch!r}" if self.dispatch else ""
        if self.chunk_bytes:
            extra += f", chunk_bytes={self.chunk_bytes}"
        if self.engine_name:
            extra += f", engine_name={self.engine_name!r}"
        return f"Database({shown!r}, schema={self.schema!r}{extra})"


def release_sessions() -> None:
    """Close every idle server process this client holds.

    The segment sessions waiting for the next fit (each a server process with TensorFlow
    loaded, holding its memory) and the idle connections of every open handle's pool are closed.
    The handles stay usable; the next fit, evaluation or prediction opens what it needs. Idle
    sessions also close by themselves after a while; call this to give their memory back now
    (in a notebook between experiments, or before the server is restarted).

    Examples
    --------
    >>> est.fit("fm.train")  # doctest: +SKIP
    >>> gpcnn.release_sessions()  # the segments' TensorFlow processes end now  # doctest: +SKIP
    """
    POOL.clear()
    with _open_lock:
        handles = list(_open.values())
    for db in handles:
        if "engine" in db.__dict__:
            db.engine.dispose()


def connect(
    url: str | sa.URL | Database | None = None,
    *,
    schema: str = DEFAULT_SCHEMA,
    dispatch: str | None = None,
    chunk_bytes: int | None = None,
    engine_name: str | None = None,
) -> Database:
    """The handle for ``url``, else ``$GPCNN_DATABASE_URL``, else the embedded cluster (started if
    needed); the same handle again for the same arguments until it is closed.

    Parameters
    ----------
    url : str, sqlalchemy.URL, Database or None
        A PostgreSQL or Greenplum URL (any driver prefix becomes psycopg2), or a handle, returned
        as it is. None: ``$GPCNN_DATABASE_URL``, else the embedded PostgreSQL of ``$GPCNN_HOME``.
        Nothing connects yet: a server that cannot be reached is told at first use, as
        ``UnreachableError`` (the URL, where it came from and what to run).
    schema : str, default "gpcnn"
        The schema of gpcnn's functions, runs and catalog for everything done with this handle.
    dispatch : {None, "statement", "sessions"}
        How iterations reach the segments: None, the engine's own way; ``"statement"``, one
        statement for all segments in one session, as on Greenplum; ``"sessions"``, a session per
        segment (PostgreSQL's own); or a mode a registered engine adds.
    chunk_bytes : int, optional
        The size of the chunks that carry weights to and from the segments (default 1 MiB).
    engine_name : str, optional
        The registered engine to run on (``gpcnn.engines.register_engine``); None: the one that
        recognises the server (PostgreSQL or Greenplum).

    Returns
    -------
    Database
        A handle that pickles without its password and is shared until ``close()``.

    Raises
    ------
    sqlalchemy.exc.ArgumentError
        ``url`` is not a database URL.
    ValueError
        ``url`` is not a PostgreSQL, Greenplum or Cloudberry URL (e.g. ``mysql://``).
    RuntimeError
        No URL and no embedded cluster registered, or the embedded cluster cannot start (an
        ``EmbeddedError``, naming why and what to run).

    Examples
    --------
    >>> import gpcnn
    >>> db = gpcnn.connect()                      # the embedded PostgreSQL
    >>> db = gpcnn.connect("postgresql://gpadmin@mdw:5432/gpdb", dispatch="statement")
    """
    if isinstance(url, Database):
        return url
    origin = "the URL given"
    if url is None:
        url, origin = os.environ.get("GPCNN_DATABASE_URL"), "from $GPCNN_DATABASE_URL"
    if url is None:
        url, origin = _default().url(), "the embedded cluster"
    try:
        parsed = _driver_url(url)
    except ValueError as e:
        raise ValueError(f"{e} ({origin})") from None
    key = (parsed.render_as_string(hide_password=False), schema, dispatch, chunk_bytes, engine_name)
    with _open_lock:
        db = _open.get(key)
        if db is None:
            db = _open[key] = Database(parsed, schema, dispatch, chunk_bytes, engine_name)
            db.origin = origin
    return db
