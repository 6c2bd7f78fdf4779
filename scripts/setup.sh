#!/usr/bin/env bash
# Idempotent setup: Debian packages, then a Python environment built with the interpreter that the
# server's plpython3u embeds, placed where the server's OS user can read it, linked as .venv.
# GPCNN_CLIENT_ONLY=1 (a client of a Greenplum or other remote server): no PostgreSQL packages, and
# the environment is built with $GPCNN_PYTHON (default: python3 on PATH), which must match the
# Python that the server's plpython3u embeds on every segment host.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
PG_MAJOR=${GPCNN_PG_MAJOR:-15}
client_only=${GPCNN_CLIENT_ONLY:-0}
packages=(python3-venv dataset-fashion-mnist)
if [ "$client_only" != 1 ]; then
  packages+=(postgresql-$PG_MAJOR postgresql-plpython3-$PG_MAJOR)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "gpcnn setup: missing Debian packages: ${missing[*]}" >&2
    echo "  install them once with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "gpcnn setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$client_only" = 1 ]; then
  server_python=$(command -v "${GPCNN_PYTHON:-python3}")
  pyver=$("$server_python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
else
  # The interpreter plpython3u embeds: the libpython it links against names it.
  plpython=/usr/lib/postgresql/$PG_MAJOR/lib/plpython3.so
  pyver=$(ldd "$plpython" | sed -n 's/.*libpython\(3\.[0-9]*\)\.so.*/\1/p' | head -n1)
  if [ -z "$pyver" ] || [ ! -x "/usr/bin/python$pyver" ]; then
    echo "gpcnn setup: cannot find the Python that $plpython embeds (ldd shows: $pyver)" >&2
    exit 1
  fi
  server_python=/usr/bin/python$pyver
fi

# Where the server's OS user can read it: as root the server runs as the 'gpcnn' user, and a checkout
# under a 0700 home (root's) is unreadable to it, so the environment lives under /opt.
if [ -n "${GPCNN_VENV_ROOT:-}" ]; then
  venv_root=$GPCNN_VENV_ROOT
elif [ "$(id -u)" -eq 0 ]; then
  venv_root=/opt/gpcnn/venvs
else
  venv_root=${XDG_DATA_HOME:-$HOME/.local/share}/gpcnn/venvs
fi
checkout_id=$(printf '%s' "$root" | sha256sum | cut -c1-12)
venv=$venv_root/py$pyver-$checkout_id
lock_hash=$(cat requirements.lock setup.cfg pyproject.toml | sha256sum | cut -c1-16)
stamp=$venv/.gpcnn-installed

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ] || [ ! -x "$venv/bin/gpcnn" ]; then
  echo "gpcnn setup: building $venv with $server_python"
  mkdir -p "$venv_root"
  chmod 755 "$venv_root" "$(dirname "$venv_root")" 2>/dev/null || true
  [ -x "$venv/bin/python" ] || "$server_python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.lock
  # The extras (study: matplotlib, mlxtend; dev) come pinned from the lock: without --no-deps and
  # with --no-index, pip checks that the lock holds everything setup.cfg asks for.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-build-isolation \
    -e ".[study,dev,docs]"
  chmod -R a+rX "$venv"
  echo "$lock_hash" >"$stamp"
fi
ln -sfn "$venv" .venv
echo "gpcnn setup: ready (.venv -> $venv)"
