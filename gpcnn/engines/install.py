"""Installs gpcnn's plpython3u functions and aggregates, generated from plain modules of gpcnn/,
and gpcnn's own tables (created, or migrated from an older shape, in the same transaction).

Every function body carries the source of the in-database modules (``gpcnn.kernel.BUNDLE``) and
loads them once per server process into ``GD`` as a private package, keyed by a hash of the
sources; then it calls one function of the module that defines it (``segment``, ``states``,
``merging``, ...). So the server needs only TensorFlow, Keras
and numpy, never gpcnn itself, and what runs inside the database is exactly what the tests import.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import sqlalchemy as sa

from gpcnn import kernel
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect, functions, migrations, roles
from gpcnn.engines.catalog import Catalog
from gpcnn.version import __version__


class InstallError(RuntimeError):
    """The database lacks what gpcnn needs, or holds another version of it."""


def _sources() -> list[tuple[str, str]]:
    """The in-database layer, module by module: ``gpcnn.kernel``'s bundle and nothing else."""
    package = resources.files("gpcnn.kernel")
    return [(name, (package / f"{name}.py").read_text()) for name in kernel.BUNDLE]


def bundle_id() -> str:
    """Identifies the installed code: the gpcnn version plus a hash of the in-database sources and
    of the DDL that declares them (a new setting on the functions is a new bundle)."""
    declared = functions.install_ddl('"schema"', "", __version__)
    digest = hashlib.sha256(repr((_sources(), declared)).encode()).hexdigest()[:12]
    return f"{__version__}+{digest}"


_BOOTSTRAP = """\
_bundle = {bundle!r}
_package = GD.get(_bundle)
if _package is None:
    import sys, types
    _name = "_gpcnn_" + _bundle.replace(".", "_").replace("+", "_")
    _package = types.ModuleType(_name)
    _package.__path__ = []
    sys.modules[_name] = _package
    for _module, _source in {sources!r}:
        _m = types.ModuleType(_name + "." + _module)
        _m.__package__ = _name
        sys.modules[_m.__name__] = _m
        exec(compile(_source, "gpcnn/kernel/" + _module + ".py", "exec"), _m.__dict__)
        setattr(_package, _module, _m)
    GD[_bundle] = _package
segment, segment_errors, states, merging, keras_state, sql_arrays = (
    _package.segment, _package.segment_errors, _package.states, _package.merging,
    _package.keras_state, _package.sql_arrays,
)
"""


def statements(schema: str = "gpcnn") -> list[str]:
    """The function and aggregate DDL that ``install`` runs (the engine layer renders it)."""
    prefix = _BOOTSTRAP.format(bundle=bundle_id(), sources=_sources())
    return functions.install_ddl(_quoted(schema), prefix, bundle_id())


def _quoted(schema: str) -> str:
    return sa.create_engine("postgresql+psycopg2://").dialect.identifier_preparer.quote(schema)


def ensure_plpython(conn: sa.Connection) -> None:
    if functions.has_plpython(conn):
        return
    try:
        functions.create_plpython(conn)
    except sa.exc.DBAPIError as e:
        raise InstallError(
            f"plpython3u is not available in this database ({str(e.orig).strip()}). Install the "
            "server package (Debian: postgresql-plpython3-15; Greenplum: the plpython3 extension on "
            "every host) and run as a superuser: CREATE EXTENSION plpython3u; then "
            "`gpcnn doctor` checks the rest."
        ) from e


@database_argument
def install(database: Database | str | None = None) -> str:
    """Create or upgrade gpcnn's functions and tables in the handle's schema, and the role
    ``<schema>_user`` that lets ordinary users run them (``gpcnn.engines.roles``), in one
    transaction; returns the installed version. Functions already installed whole by this same
    version are kept as they are, so that the fits other sessions run on them go on.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect`` (its schema is the one installed into), a URL, or None for
        the default database. Needs a superuser: ``plpython3u`` is untrusted.

    Returns
    -------
    str
        The bundle id: gpcnn's version plus a hash of the code the database runs.

    Raises
    ------
    InstallError
        The user is not a superuser (the message gives the GRANT that lets them use an install
        made by one), or ``plpython3u`` is missing from the server.

    Examples
    --------
    >>> import gpcnn
    >>> gpcnn.install(gpcnn.connect(schema="gpcnn"))  # doctest: +SKIP
    '0.2.0+...'
    """
    db = connect(database)
    backend = db.backend
    with db.begin() as conn:
        if not roles.is_superuser(conn):
            raise InstallError(
                f"installing gpcnn needs a superuser (plpython3u is untrusted), and "
                f"{db.url.username!r} is not one: a superuser runs `gpcnn install --schema "
                f"{db.schema}`, then GRANT {roles.role_name(db.schema)} TO {db.url.username}"
            )
        ensure_plpython(conn)
        backend.ensure_schema(conn, db.schema)
        ddl = statements(db.schema)
        if not _current(conn, db.schema, len(ddl)):
            functions.drop_existing(conn, db.schema)
            for statement in ddl:
                functions.run_ddl(conn, statement)
        Catalog(conn, backend).ensure_tables()
        roles.ensure_role(conn, backend)
    return bundle_id()


def _current(conn: sa.Connection, schema: str, count: int) -> bool:
    """The schema already holds this bundle whole: ``version()`` says this bundle, and all
    ``count`` functions and aggregates are there. Then ``install`` leaves them alone: dropping
    and creating them again would fail every statement other sessions are running on them
    ("cache lookup failed for function"), a fit's included."""
    found = functions.existing(conn, schema)
    names = {signature.split("(")[0].rsplit(".", 1)[-1] for signature, _ in found}
    if len(found) != count or "version" not in names:
        return False
    return conn.execute(sa.text(f"SELECT {_quoted(schema)}.version()")).scalar() == bundle_id()


@database_argument
def uninstall(database: Database | str | None = None, *, keep_data: bool = False) -> None:
    """Remove gpcnn's functions and aggregates and, unless told to keep them, its tables.

    Its tables are the runs, checkpoints, model library and the image-table catalogs; image tables
    themselves stay, in their own schemas. The schema goes too if empty (and the staging schema
    ``<schema>_staging``, if empty), and then the role ``<schema>_user`` unless it still has
    privileges elsewhere. Needs a superuser.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.
    keep_data : bool, default False
        Keep gpcnn's tables (a later ``install`` finds them again).
    """
    db = connect(database)
    backend = db.backend
    with db.begin() as conn:
        functions.drop_existing(conn, db.schema)
        if not keep_data:
            for statement in migrations.drop_ddl(backend):
                conn.exec_driver_sql(statement)
            staging = roles.staging_schema(db.schema)
            if migrations.schema_exists(conn, staging) and migrations.schema_is_empty(
                conn, staging
            ):
                conn.exec_driver_sql(backend.drop_schema_ddl(staging))
            if migrations.schema_is_empty(conn, db.schema):
                conn.exec_driver_sql(backend.drop_schema_ddl(db.schema))
                roles.drop_role(conn, backend)


def installed_version(db: Database | str | None = None) -> str | None:
    return functions.installed_version(connect(db).backend)


def ensure_installed(db: Database | str | None = None) -> str:
    """Install when absent; refuse to run against another installed version or table shape."""
    db = connect(db)
    found = installed_version(db)
    if found is None:
        return install(db)
    if found != bundle_id():
        raise InstallError(
            f"schema {db.schema!r} holds gpcnn {found}, but this client is gpcnn {bundle_id()}. "
            f"Upgrade the database with `gpcnn install --schema {db.schema}` "
            "(or gpcnn.install(db))."
        )
    with db.connect() as conn:
        shape = Catalog(conn, db.backend).shape()
    if shape != migrations.SHAPE_VERSION:
        raise InstallError(
            f"gpcnn's tables in schema {db.schema!r} have shape {shape}, this client uses "
            f"{migrations.SHAPE_VERSION}: run `gpcnn install --schema {db.schema}` to migrate them"
        )
    return found
