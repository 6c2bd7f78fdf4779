"""The embedded database: a private PostgreSQL cluster that gpcnn starts on demand.

PostgreSQL refuses to run as root, so when the client runs as root the cluster belongs to an ordinary
system user (``gpcnn``, created on first use); otherwise to the current user. The data directory lives
under that user's state directory (``$GPCNN_HOME`` overrides it). The server listens on a Unix socket in
that directory and on 127.0.0.1 at a free port, with password authentication for a superuser ``gpcnn``
whose password is generated at ``initdb``. Its environment puts the client's Python environment on the
server's path, so ``plpython3u`` imports the same TensorFlow, and fixes TensorFlow's settings.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from gpcnn.engines import DatabaseError
from gpcnn.engines.database import register_default_server
from gpcnn.engines.postgres import bootstrap
from gpcnn.tools import os_user

PG_MAJOR = 15
SUPERUSER = "gpcnn"
DATABASE = "gpcnn"

# Settings that change TensorFlow's results or noise; fixed for every backend of the cluster.
SERVER_ENV = {
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONHASHSEED": "0",
}

SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "64",
    "shared_buffers": "128MB",
    # Commits return before the WAL is on disk, except those a crash must not lose: an
    # iteration's row and a run's status wait for it (Catalog._durable).
    "synchronous_commit": "off",
    # One partition per segment, one session per partition: parallel query would re-import TF in
    # throw-away workers and could train one model across partitions (docs/design.md, Engines).
    "max_parallel_workers_per_gather": "0",
    "log_min_messages": "warning",
    "timezone": "UTC",
}


class EmbeddedError(RuntimeError):
    """The embedded cluster cannot be set up or started; the message says what to do."""


@dataclass(frozen=True)
class Cluster:
    """Where the embedded cluster lives and who runs it."""

    home: Path
    user: str

    @property
    def data_dir(self) -> Path:
        return self.home / f"pg{PG_MAJOR}"

    @property
    def socket_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    @property
    def config_file(self) -> Path:
        return self.home / "cluster.json"

    def config(self) -> dict:
        return json.loads(self.config_file.read_text())

    def url(self) -> str:
        cfg = self.config()
        return f"postgresql+psycopg2://{SUPERUSER}:{cfg['password']}@127.0.0.1:{cfg['port']}/{DATABASE}"


def bin_dir() -> Path:
    """PostgreSQL's server programs (``GPCNN_PG_BINDIR`` overrides the Debian location)."""
    path = Path(os.environ.get("GPCNN_PG_BINDIR", f"/usr/lib/postgresql/{PG_MAJOR}/bin"))
    if not (path / "pg_ctl").exists():
        raise EmbeddedError(
            f"PostgreSQL {PG_MAJOR} server programs not found in {path}. Run `make setup` "
            f"(it installs postgresql-{PG_MAJOR} and postgresql-plpython3-{PG_MAJOR}), or set "
            "GPCNN_PG_BINDIR, or point gpcnn at another server with GPCNN_DATABASE_URL."
        )
    return path


def cluster() -> Cluster:
    """The cluster for this OS user; as root, the cluster of the server user."""
    user = os_user.server_user()
    if "GPCNN_HOME" in os.environ:
        home = Path(os.environ["GPCNN_HOME"])
    elif os.geteuid() == 0:
        home = Path("/var/lib/gpcnn")
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        home = Path(state) / "gpcnn"
    return Cluster(home=home, user=user)


def server_site_packages() -> Path:
    """The client's site-packages: TensorFlow for the server comes from the same environment.
    Resolved: ``.venv`` in a checkout is a link, and the checkout may be unreadable to the server."""
    return Path(sysconfig.get_paths()["purelib"]).resolve()


def _check_readable_by_server(c: Cluster, path: Path, what: str, remedy: str) -> None:
    blocked = os_user.blocked_path(c.user, path)
    if blocked is not None:
        raise EmbeddedError(
            f"the server's OS user '{c.user}' cannot read {what} {path} "
            f"({blocked} is not readable by others). {remedy}"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _server_env(c: Cluster) -> dict[str, str]:
    home = c.home / "server-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PYTHON"))}
    env.update(SERVER_ENV)
    env.update(
        PYTHONPATH=str(server_site_packages()),
        HOME=str(home),
        KERAS_HOME=str(home / ".keras"),
        MPLCONFIGDIR=str(home / ".matplotlib"),
        LC_ALL="C.UTF-8",
    )
    return env


def _run(c: Cluster, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        os_user.as_user(c.user, argv), env=_server_env(c), capture_output=True, text=True, **kwargs
    )


def init(c: Cluster | None = None) -> Cluster:
    """Create the cluster's data directory once (``initdb``); no-op when it exists."""
    c = c or cluster()
    if os.geteuid() == 0:
        os_user.ensure(c.user, c.home)
    version_file = c.data_dir / "PG_VERSION"
    if version_file.exists():
        found = version_file.read_text().strip()
        if found != str(PG_MAJOR):
            raise EmbeddedError(
                f"{c.data_dir} holds a PostgreSQL {found} cluster, but gpcnn runs PostgreSQL "
                f"{PG_MAJOR}. Remove it (`gpcnn db destroy`) or set GPCNN_HOME to another directory."
            )
        if c.config_file.exists():
            return c
    if c.data_dir.exists() and not version_file.exists():
        shutil.rmtree(c.data_dir)  # an initdb that died half-way
    for d in (c.home, c.socket_dir, c.home / "server-home"):
        d.mkdir(parents=True, exist_ok=True)
        os_user.give_to(c.user, d)
    c.home.chmod(0o700)
    _check_readable_by_server(
        c,
        c.home,
        "the cluster's folder",
        "Set GPCNN_HOME to a folder outside it (the default, /var/lib/gpcnn, is), or chmod o+rx "
        "the path.",
    )
    password = secrets.token_hex(16)
    pwfile = c.home / "initdb.pw"
    pwfile.write_text(password + "\n")
    os_user.give_to(c.user, pwfile)
    try:
        done = _run(
            c,
            [
                str(bin_dir() / "initdb"),
                "-D",
                str(c.data_dir),
                "-U",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
        )
    finally:
        pwfile.unlink()
    if done.returncode != 0:
        raise EmbeddedError(f"initdb failed:\n{done.stderr or done.stdout}")
    with open(c.data_dir / "postgresql.conf", "a") as conf:
        conf.write("\n# gpcnn embedded settings\n")
        for key, value in SERVER_SETTINGS.items():
            conf.write(f"{key} = '{value}'\n")
    c.config_file.write_text(json.dumps({"password": password, "port": _free_port()}))
    c.config_file.chmod(0o600)
    return c


def is_running(c: Cluster | None = None) -> bool:
    c = c or cluster()
    if not (c.data_dir / "PG_VERSION").exists():
        return False
    return _run(c, [str(bin_dir() / "pg_ctl"), "status", "-D", str(c.data_dir)]).returncode == 0


def _remove_stale_pid(c: Cluster) -> None:
    pid_file = c.data_dir / "postmaster.pid"
    if not pid_file.exists():
        return
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        pid_file.unlink()  # the server that wrote it is gone
        return
    except PermissionError:
        pass
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists() and b"postgres" not in cmdline.read_bytes():
        pid_file.unlink()  # the pid was reused by an unrelated process


def start(c: Cluster | None = None, timeout: int = 60) -> Cluster:
    """Start the cluster (initialising it first if needed); no-op when it runs."""
    c = init(c)
    site_packages = server_site_packages()
    _check_readable_by_server(
        c,
        site_packages,
        "the Python environment",
        "Run `make setup`, which places the environment under /opt/gpcnn where the server can "
        "read it, or chmod o+rx the path.",
    )
    cfg = c.config()
    if is_running(c):
        serving = cfg.get("site_packages")
        if serving is None or serving == str(site_packages) or Path(serving).exists():
            return c
        stop(c)  # it serves a Python environment that was deleted since: restart on ours
    _remove_stale_pid(c)
    cfg["site_packages"] = str(site_packages)
    c.config_file.write_text(json.dumps(cfg))
    if _port_in_use(cfg["port"]):
        cfg["port"] = _free_port()
        c.config_file.write_text(json.dumps(cfg))
    options = f"-p {cfg['port']} -k {c.socket_dir}"
    try:
        done = _run(
            c,
            [
                str(bin_dir() / "pg_ctl"),
                "start",
                "-w",
                "-t",
                str(timeout),
                "-D",
                str(c.data_dir),
                "-l",
                str(c.log_file),
                "-o",
                options,
            ],
            timeout=timeout + 10,
        )
    except subprocess.TimeoutExpired as e:
        raise EmbeddedError(f"the server did not start within {timeout} s; see {c.log_file}") from e
    if done.returncode != 0:
        tail = c.log_file.read_text()[-2000:] if c.log_file.exists() else done.stderr
        raise EmbeddedError(f"the server did not start (pg_ctl: {done.stderr.strip()}):\n{tail}")
    _bootstrap(c)
    return c


def _bootstrap(c: Cluster) -> None:
    """initdb makes only ``postgres``: gpcnn's database and plpython3u are created on first start."""
    try:
        bootstrap(c.url(), "postgres", DATABASE)
    except DatabaseError as e:
        raise EmbeddedError(
            f"CREATE EXTENSION plpython3u failed: {e.orig}. Install postgresql-plpython3-{PG_MAJOR} "
            "(`make setup` does)."
        ) from e


def stop(c: Cluster | None = None, timeout: int = 60) -> None:
    """Stop the cluster (fast shutdown: open sessions are ended); no-op when it is not running."""
    c = c or cluster()
    if not is_running(c):
        return
    done = _run(
        c,
        [
            str(bin_dir() / "pg_ctl"),
            "stop",
            "-w",
            "-t",
            str(timeout),
            "-m",
            "fast",
            "-D",
            str(c.data_dir),
        ],
    )
    if done.returncode != 0:
        raise EmbeddedError(f"pg_ctl stop failed: {done.stderr.strip()}")


def destroy(c: Cluster | None = None) -> None:
    """Stop the cluster and delete its data directory."""
    c = c or cluster()
    if (c.data_dir / "PG_VERSION").exists() and c.data_dir.joinpath(
        "PG_VERSION"
    ).read_text().strip() == str(PG_MAJOR):
        stop(c)
    shutil.rmtree(c.home, ignore_errors=True)


def status(c: Cluster | None = None) -> dict:
    c = c or cluster()
    info = {"home": str(c.home), "user": c.user, "running": is_running(c)}
    if c.config_file.exists():
        info["port"] = c.config()["port"]
    return info


def configured_url() -> str | None:
    """The embedded cluster's URL if it was ever initialised here (nothing is started)."""
    c = cluster()
    try:
        return c.url()
    except (OSError, ValueError, KeyError):
        return None


def url() -> str:
    """The URL of the embedded cluster, started (and created) if needed."""
    c = start()
    return c.url()


# This module is ``connect()``'s default server: it has ``url`` and ``configured_url``.
register_default_server(sys.modules[__name__])
