"""The model library's statements: Keras models stored under a name in ``models`` (the model's
JSON) and ``model_weights`` (its weights, if stored, in chunks like checkpoints: by binary COPY,
never inside statement text), as a ``Library`` on the caller's connection and transaction.

Names are each role's own: a role stores, replaces and deletes its own models, and reads those of
the roles it holds (row-level security, ``roles``); a name it holds twice means its own first,
then the other roles' in the order of their names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

import numpy as np
import sqlalchemy as sa

from gpcnn.engines import migrations, shapes
from gpcnn.engines.backend import Backend
from gpcnn.engines.copying import write_chunks
from gpcnn.engines.results import assemble

WEIGHTS_PREFIX = (("name", "text"),)


@dataclass(frozen=True)
class StoredModel:
    """A row of ``models``; ``weights`` None when only the architecture was stored (or not read)."""

    name: str
    owner: str
    model_json: str
    has_weights: bool
    description: str | None
    created_at: datetime
    gpcnn_version: str
    stored_bytes: int
    weights: np.ndarray | None = None


@dataclass(frozen=True)
class Library:
    """The model library in the backend's schema (``Library(conn, db.backend)``); the tables are
    made or migrated first, in the caller's transaction."""

    conn: sa.Connection
    backend: Backend

    def __post_init__(self) -> None:
        migrations.ensure_tables(self.conn, self.backend)

    @property
    def _tables(self) -> shapes.Tables:
        return shapes.tables(self.backend.schema)

    def store(
        self,
        name: str,
        model_json: str,
        weights: np.ndarray | None,
        description: str | None,
        replace: bool,
    ) -> None:
        """Store a model under ``name``; an existing one is refused unless ``replace``."""
        from gpcnn.version import __version__

        t = self._tables
        self.backend.lock_name(self.conn, f"gpcnn model {name}")
        if self.exists(name):
            if not replace:
                raise ValueError(
                    f"a model {name!r} is stored already: pass replace=True to overwrite it, "
                    "or choose another name"
                )
            self.delete(name)
        self.conn.execute(
            t.models.insert().values(
                name=name,
                model_json=model_json,
                weights=weights is not None,
                description=description,
                gpcnn_version=__version__,
            )
        )
        if weights is not None:
            table_sql = shapes.qualified(self.backend, "model_weights")
            write_chunks(self.conn, self.backend, table_sql, WEIGHTS_PREFIX, [((name,), weights)])

    # this role, in the statement itself (no round trip to ask who it is)
    _me: ClassVar[sa.ColumnClause[str]] = sa.literal_column("CAST(CURRENT_USER AS text)")

    def exists(self, name: str) -> bool:
        """Whether this role stores a model under ``name``."""
        m = self._tables.models
        mine = sa.select(m.c.name).where(m.c.name == name, m.c.created_by == self._me)
        return self.conn.execute(mine).first() is not None

    def entries(self, name: str | None = None) -> list[StoredModel]:
        """Every stored model (or the one named), by name, without weights."""
        t = self._tables
        m, w = t.models, t.model_weights
        sizes = (
            sa.select(
                w.c.name,
                w.c.created_by,
                sa.func.sum(sa.func.octet_length(w.c.data)).label("size"),
            )
            .group_by(w.c.name, w.c.created_by)
            .subquery()
        )
        joined = sa.and_(sizes.c.name == m.c.name, sizes.c.created_by == m.c.created_by)
        query = (
            sa.select(m, sa.func.coalesce(sizes.c.size, 0).label("size"))
            .select_from(m.outerjoin(sizes, joined))
            .order_by(m.c.name, (m.c.created_by == self._me).desc(), m.c.created_by)
        )
        if name is not None:
            query = query.where(m.c.name == name)
        return [
            StoredModel(
                name=r.name,
                owner=r.created_by,
                model_json=r.model_json,
                has_weights=bool(r.weights),
                description=r.description,
                created_at=r.created_at,
                gpcnn_version=r.gpcnn_version,
                stored_bytes=int(r.size),
            )
            for r in self.conn.execute(query)
        ]

    def load(self, name: str) -> StoredModel | None:
        """The model stored under ``name`` with its weights, or None."""
        found = self.entries(name)
        if not found:
            return None
        entry = found[0]
        if not entry.has_weights:
            return entry
        w = self._tables.model_weights
        rows = self.conn.execute(
            sa.select(w.c.chunk, w.c.data).where(w.c.name == name, w.c.created_by == entry.owner)
        )
        weights = assemble({int(c): d for c, d in rows}, f"the weights of model {name!r}")
        return dataclasses.replace(entry, weights=weights)

    def delete(self, name: str) -> bool:
        """Delete this role's model and its weights; whether it was there."""
        t, me = self._tables, self._me
        w, m = t.model_weights, t.models
        self.conn.execute(w.delete().where(w.c.name == name, w.c.created_by == me))
        return (
            self.conn.execute(m.delete().where(m.c.name == name, m.c.created_by == me)).rowcount > 0
        )
