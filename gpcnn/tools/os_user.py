"""The OS user that runs the embedded server: this user, or, when the client runs as root (which
PostgreSQL refuses), an ordinary system user created on first use; commands run as it, files given
to it, and the folder it cannot read named before the server fails on it."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

SERVER_USER = "gpcnn"  # the OS user that runs the server when the client is root


def server_user() -> str:
    """Who runs the server: this OS user; as root, ``$GPCNN_SERVER_USER`` or ``gpcnn`` (an ordinary
    system user, created on first use: PostgreSQL refuses to run as root)."""
    if os.geteuid() == 0:
        return os.environ.get("GPCNN_SERVER_USER") or SERVER_USER
    return pwd.getpwuid(os.geteuid()).pw_name


def ensure(user: str, home: Path) -> None:
    """The server's OS user, created without a home: the server's HOME is the cluster's
    ``server-home`` folder (under ``home``), passed in its environment."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                str(home / "server-home"),
                "--shell",
                "/usr/sbin/nologin",
                user,
            ],
            check=True,
        )


def as_user(user: str, argv: list[str]) -> list[str]:
    """``argv`` run as ``user`` when this process is root, else as it is."""
    # --preserve-environment: runuser would otherwise reset HOME to the user's passwd entry, a
    # folder that need not exist, and TensorFlow and Keras write under HOME.
    if os.geteuid() == 0:
        return ["runuser", "--preserve-environment", "-u", user, "--", *argv]
    return argv


def give_to(user: str, path: Path) -> None:
    """``path`` owned by ``user`` (when this process is root, which alone may)."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def blocked_path(user: str, path: Path) -> Path | None:
    """The folder on the way to ``path`` that ``user`` cannot enter (a 0700 directory such as
    root's home or a ``mktemp -d`` folder), or None: such a folder makes initdb or TensorFlow fail
    inside the server, confusingly, so it is named first. Only a root client asks."""
    if os.geteuid() != 0:
        return None
    probe = subprocess.run(as_user(user, ["test", "-r", str(path), "-a", "-x", str(path)]))
    if probe.returncode == 0:
        return None
    uid = pwd.getpwnam(user).pw_uid
    return next(
        (
            p
            for p in [path, *path.parents]
            if p.exists() and os.stat(p).st_uid != uid and not os.stat(p).st_mode & 0o005
        ),
        path,
    )
