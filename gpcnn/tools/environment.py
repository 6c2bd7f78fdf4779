"""``check_environment``: can this database run gpcnn? Versions as seen from inside plpython3u."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import gpcnn.fit.rules  # noqa: F401  (its plug-ins, loaded on import, are reported)
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, DatabaseError, connect, engine_registry
from gpcnn.engines.install import InstallError, ensure_installed, ensure_plpython


class ServerPythonError(InstallError):
    """The server's Python lacks something gpcnn needs; the message names the fix."""


@dataclass
class EnvironmentReport:
    engine_kind: str
    dispatch: str
    server_version: str
    segments: int
    installed: str
    probes: list[dict] = field(default_factory=list)
    schema: str = "gpcnn"
    facts: dict = field(default_factory=dict)  # Backend.doctor_facts()
    engine_lines: list[str] = field(default_factory=list)  # Backend.doctor_lines(facts, probes)
    plugins: dict = field(default_factory=dict)  # entry-point group -> plug-ins loaded from it

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"engine:   {self.engine_kind} ({self.server_version.split(' on ')[0]}), "
            f"dispatch: {self.dispatch}",
            f"segments: {self.segments} (default K for new image tables)",
            f"gpcnn:    {self.installed} installed",
        ]
        loaded = [f"{group} {', '.join(names)}" for group, names in self.plugins.items() if names]
        if loaded:
            lines.append(f"plug-ins: {'; '.join(loaded)}")
        for p in self.probes:
            where = "server" if p["segment"] < 0 else f"segment {p['segment']}"
            threads = p["tf_threads"] or "TensorFlow's default"
            lines.append(
                f"{where}: Python {p['python']}, TensorFlow {p['tensorflow']}, Keras {p['keras']}, "
                f"numpy {p['numpy']}, {p['cpu_count']} CPUs, TF threads: {threads}"
            )
        return "\n".join(lines + self.fact_lines())

    def fact_lines(self) -> list[str]:
        """The engine's own lines (``Backend.doctor_lines``: Greenplum's cluster, memory,
        resources and mirrors; PostgreSQL's replicas), then autovacuum and the JIT, and what they
        mean for gpcnn."""
        f = self.facts
        lines = list(self.engine_lines)
        megabytes = sum(f.get("table_bytes", {}).values()) / 1e6
        autovacuum = f.get("settings", {}).get("autovacuum")
        if autovacuum == "off":
            lines.append(
                f"autovacuum: off: pruned checkpoints and used transfers stay on disk as dead rows "
                f"until VACUUM (VACUUM FULL {self.schema}.checkpoints, {self.schema}.transfers); "
                f"gpcnn's tables take {megabytes:.1f} MB now"
            )
        elif autovacuum:
            lines.append(
                f"autovacuum: {autovacuum}: the server reclaims pruned checkpoints and used "
                f"transfers; gpcnn's tables take {megabytes:.1f} MB now"
            )
        if f.get("jit_available"):
            lines.append(
                "jit:      available: gpcnn's functions refuse to start TensorFlow where it is on, "
                "but a member who turns it on after them can crash the server; on a shared server "
                "set jit_provider = 'none' (docs/guide/privileges.md, 'Threat model')"
            )
        return lines


@database_argument
def check_environment(database: Database | str | None = None) -> EnvironmentReport:
    """Probe every segment's Python; raise one actionable error for each missing piece.

    What ``gpcnn doctor`` prints: the engine and its version, the segments, and the Python,
    TensorFlow, Keras and numpy versions that ``plpython3u`` sees on each segment.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.

    Returns
    -------
    EnvironmentReport
        The facts; ``str()`` of it is the report, ``as_dict()`` its fields.

    Raises
    ------
    ServerPythonError
        When TensorFlow, Keras or numpy cannot be imported inside the server, with what to do.
    InstallError
        When ``plpython3u`` is missing or gpcnn cannot be installed.
    """
    db = connect(database)
    with db.begin() as conn:
        ensure_plpython(conn)
    installed = ensure_installed(db)
    backend = db.backend
    try:
        probes = backend.probe_segments()
    except DatabaseError as e:
        message = str(e.orig)
        if "No module named" in message:
            raise ServerPythonError(
                "TensorFlow cannot be imported inside the server's plpython3u "
                f"({message.strip().splitlines()[0]}). Put an environment with tensorflow, keras 3 "
                "and numpy, built with the Python that plpython3u embeds, on the server's Python "
                "path (the embedded cluster does this after `make setup`; on Greenplum install them "
                "for every segment host's Python, see docs/greenplum.md)."
            ) from e
        raise
    for p in probes:
        if not p["keras"].startswith("3."):
            raise ServerPythonError(
                f"the server imports Keras {p['keras']}; gpcnn needs Keras 3 (pip install "
                "'keras>=3' tensorflow>=2.16 into the server's Python environment)"
            )
    facts = backend.doctor_facts()
    return EnvironmentReport(
        engine_kind=backend.kind,
        dispatch=backend.dispatch,
        server_version=backend.server_version(),
        segments=backend.default_segments(),
        installed=installed,
        probes=probes,
        schema=db.schema,
        facts=facts,
        engine_lines=backend.doctor_lines(facts, probes),
        plugins={group: list(names) for group, names in engine_registry.PLUGINS.items()},
    )
