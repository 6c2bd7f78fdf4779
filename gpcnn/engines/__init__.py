"""One backend per engine behind one interface: PostgreSQL (embedded default) and Greenplum/Cloudberry."""

from __future__ import annotations

import os

import sqlalchemy as sa

from .base import Backend
from .greenplum import GreenplumBackend
from .postgres import PostgresBackend

__all__ = ["Backend", "GreenplumBackend", "PostgresBackend", "backend_for", "connect"]


def connect(url: str | None = None) -> sa.Engine:
    """A SQLAlchemy engine: ``url``, else ``$GPCNN_DATABASE_URL``, else the embedded cluster."""
    if url is None:
        url = os.environ.get("GPCNN_DATABASE_URL")
    if url is None:
        from .. import embedded

        url = embedded.url()
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres", "greenplum"):
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return sa.create_engine(parsed, pool_pre_ping=True)


def backend_for(engine: sa.Engine, schema: str = "gpcnn") -> Backend:
    """The backend that matches the server behind ``engine``."""
    with engine.connect() as conn:
        role = conn.execute(sa.text("SELECT current_setting('gp_role', true)")).scalar()
    cls = GreenplumBackend if role else PostgresBackend
    return cls(engine, schema)
