#!/bin/sh
# The image's entrypoint: on the first start (an empty $PGDATA) create the cluster, with superuser
# `postgres` whose password is $POSTGRES_PASSWORD, gpcnn's server settings and plpython3u; then run
# the server in the foreground (as PID 1, so `docker stop` reaches it).
set -eu

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "gpcnn-postgres: set POSTGRES_PASSWORD (the superuser's password) for the first start" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U postgres --pwfile="$pwfile" --auth-local=peer \
        --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8
    rm -f "$pwfile"
    # Clients come through Docker's port mapping, from the bridge's address: a password from any.
    printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' \
        >> "$PGDATA/pg_hba.conf"
    # The embedded cluster's settings (gpcnn/tools/embedded.py, SERVER_SETTINGS), listening on
    # every interface of the container: the published port decides who reaches it.
    cat >> "$PGDATA/postgresql.conf" <<'CONF'

# gpcnn settings (docker/entrypoint.sh)
listen_addresses = '*'
max_connections = '64'
shared_buffers = '128MB'
synchronous_commit = 'off'
max_parallel_workers_per_gather = '0'
log_min_messages = 'warning'
timezone = 'UTC'
CONF
    # gpcnn install would create it too (as a superuser); here so `gpcnn doctor` sees it at once.
    echo 'CREATE EXTENSION IF NOT EXISTS plpython3u;' | postgres --single -D "$PGDATA" postgres >/dev/null
fi
unset POSTGRES_PASSWORD
exec postgres -D "$PGDATA" "$@"
