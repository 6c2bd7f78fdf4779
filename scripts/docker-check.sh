#!/usr/bin/env bash
# Check docker/Dockerfile and docker-compose.yml end to end: build the Debian base image if it is
# missing (debootstrap, so no image registry is needed), build the server image, start the compose
# service, wait until it is healthy, run `gpcnn doctor` and a short fit (a 2-segment small CNN on
# 2,000 Fashion-MNIST images) through the published port on 127.0.0.1, and tear the service down
# (its volume too; the images stay). Not part of `make test`; see docs/docker.md.
#
#   scripts/docker-check.sh            # needs a running Docker engine and `make setup` done
#
# Settings (environment):
#   GPCNN_DOCKER_BASE      base image (default gpcnn/debian:bookworm; built here when missing,
#                          which needs root and debootstrap)
#   GPCNN_DOCKER_IMAGE     server image tag (default gpcnn/postgres:15-tf2.21)
#   GPCNN_DOCKER_PORT      port published on 127.0.0.1 (default: a free one)
#   GPCNN_DOCKER_CA_BUNDLE CA bundle pip trusts during the build (default
#                          /etc/ssl/certs/ca-certificates.crt when present; "" for none)
#   GPCNN_DOCKER_PIP_CONF  a pip configuration file for the build (default: none)
#   DOCKER                 the docker client (default docker). The Dockerfile needs BuildKit: a
#                          client of Docker 23 or later needs the buildx plugin for it, a 20.10
#                          client (Debian bookworm's docker.io: /usr/bin/docker) has it built in
#   DEBIAN_MIRROR          debootstrap's mirror (default http://deb.debian.org/debian)
#   GPCNN_DOCKER_KEEP=1    leave the service running (stop it: docker-compose -p gpcnncheck down -v)
set -euo pipefail
cd "$(dirname "$0")/.."

export GPCNN_DOCKER_BASE=${GPCNN_DOCKER_BASE:-gpcnn/debian:bookworm}
export GPCNN_DOCKER_IMAGE=${GPCNN_DOCKER_IMAGE:-gpcnn/postgres:15-tf2.21}
export GPCNN_DOCKER_PASSWORD
GPCNN_DOCKER_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
export GPCNN_DOCKER_PORT=${GPCNN_DOCKER_PORT:-$(python3 -c \
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
CA_BUNDLE=${GPCNN_DOCKER_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PROJECT=gpcnncheck
DOCKER=${DOCKER:-docker}
docker() { command "$DOCKER" "$@"; }  # every docker command below uses $DOCKER
PY=.venv/bin/python
# One check at a time on a machine: two would share the compose project and its network.
exec 9>/tmp/gpcnn-docker-check.lock
flock -n 9 || { echo "docker-check: another check is running (/tmp/gpcnn-docker-check.lock)" >&2; exit 1; }

if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose -p "$PROJECT")
    COMPOSE_VERSION="docker compose $(docker compose version --short)"
elif command -v docker-compose >/dev/null; then
    COMPOSE=(docker-compose -p "$PROJECT")
    COMPOSE_VERSION="docker-compose $(docker-compose version --short)"
else
    echo "docker-check: neither \`docker compose\` nor \`docker-compose\` is installed" >&2
    exit 1
fi
[ -x "$PY" ] || { echo "docker-check: run \`make setup\` first (the client)" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "docker-check: no Docker engine answers (start dockerd)" >&2; exit 1; }

phase_start=$SECONDS
declare -a TIMINGS=()
phase_done() {  # record how long the phase named $1 took
    TIMINGS+=("$1 $((SECONDS - phase_start)) s")
    phase_start=$SECONDS
}

make_base() {
    # A minimal Debian bookworm, as Debian's own images are: package scripts start no services,
    # no apt lists or caches kept.
    [ "$(id -u)" = 0 ] || { echo "docker-check: building $GPCNN_DOCKER_BASE needs root" >&2; exit 1; }
    command -v debootstrap >/dev/null || { echo "docker-check: apt-get install debootstrap" >&2; exit 1; }
    local root
    root=$(mktemp -d /var/tmp/gpcnn-debian.XXXXXX)
    nice -n 10 debootstrap --variant=minbase bookworm "$root" "$MIRROR"
    printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    printf 'deb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
        "$MIRROR" >> "$root/etc/apt/sources.list"
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/cache/apt/*.bin
    tar -C "$root" --numeric-owner -c . | docker import --change 'CMD ["bash"]' - "$GPCNN_DOCKER_BASE"
    rm -rf "$root"
}

if ! docker image inspect "$GPCNN_DOCKER_BASE" >/dev/null 2>&1; then
    echo "== base image $GPCNN_DOCKER_BASE (debootstrap from $MIRROR)"
    make_base
    phase_done "base image (debootstrap + import):"
fi

echo "== server image $GPCNN_DOCKER_IMAGE"
build=("$DOCKER" build -f docker/Dockerfile -t "$GPCNN_DOCKER_IMAGE" --build-arg "BASE_IMAGE=$GPCNN_DOCKER_BASE")
[ -n "$CA_BUNDLE" ] && build+=(--secret "id=ca_bundle,src=$CA_BUNDLE")
[ -n "${GPCNN_DOCKER_PIP_CONF:-}" ] && build+=(--secret "id=pip_conf,src=$GPCNN_DOCKER_PIP_CONF")
if ! DOCKER_BUILDKIT=1 nice -n 10 "${build[@]}" .; then
    echo "docker-check: the build failed; if BuildKit is missing, install buildx or set DOCKER" \
        "to a Docker 20.10 client (see the top of this script)" >&2
    exit 1
fi
phase_done "server image build:"

teardown() {
    if [ "${GPCNN_DOCKER_KEEP:-}" = 1 ]; then
        echo "== left running on 127.0.0.1:$GPCNN_DOCKER_PORT (password $GPCNN_DOCKER_PASSWORD)"
    else
        "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
}
trap teardown EXIT

echo "== compose service on 127.0.0.1:$GPCNN_DOCKER_PORT"
"${COMPOSE[@]}" up -d --no-build
container=$("${COMPOSE[@]}" ps -q postgres)
health=starting
for _ in $(seq 180); do
    # An engine under load can fail to answer for a just-created container: ask again.
    health=$(docker inspect --type container -f '{{.State.Health.Status}}' "$container" || echo unknown)
    [ "$health" = healthy ] && break
    sleep 1
done
if [ "$health" != healthy ]; then
    "${COMPOSE[@]}" logs --tail 50 postgres >&2
    echo "docker-check: the service is $health after 180 s" >&2
    exit 1
fi
phase_done "service up until healthy:"

export GPCNN_DATABASE_URL="postgresql://postgres:$GPCNN_DOCKER_PASSWORD@127.0.0.1:$GPCNN_DOCKER_PORT/postgres"
echo "== gpcnn doctor"
.venv/bin/gpcnn doctor
phase_done "gpcnn doctor:"

echo "== a short fit"
"$PY" - <<'PYTHON'
import math

import gpcnn
from gpcnn import GreenplumCNN
from gpcnn.datasets import load_fashion_mnist
from gpcnn.models import keras_module, small_cnn

db = gpcnn.connect()  # $GPCNN_DATABASE_URL: the container
print(f"gpcnn {gpcnn.install(db)} installed")
data = load_fashion_mnist()
for table, x, y in [
    ("docker_check_train", data.x_train[:2000], data.y_train[:2000]),
    ("docker_check_test", data.x_test[:500], data.y_test[:500]),
]:
    gpcnn.load_images(db, table, x, y, segments=2, class_names=data.class_names, replace=True)
keras_module().utils.set_random_seed(0)
estimator = GreenplumCNN(
    small_cnn(), iterations=4, validation_table="docker_check_test", seed=0, database=db
)
with estimator:
    estimator.fit("docker_check_train")
for row in estimator.history_:
    print(
        f"iteration {row['iteration']}: loss {row['loss']:.4f}  val_accuracy "
        f"{row['val_accuracy']:.4f}  {row['seconds']:.1f} s"
    )
first, last = estimator.history_[0], estimator.history_[-1]
assert math.isfinite(last["loss"]) and last["loss"] < first["loss"], "the loss did not fall"
assert last["val_accuracy"] > 0.3, f"not clearly better than chance (0.1): {last}"
db.close()
PYTHON
phase_done "short fit (install, load 2,500 images, 4 iterations):"

size=$(docker image inspect -f '{{.Size}}' "$GPCNN_DOCKER_IMAGE")
echo "== docker-check passed"
echo "commit:     $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- docker docker-compose.yml scripts || echo ' (+ local changes)')"
echo "date:       $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "engine:     Docker $(docker version -f '{{.Server.Version}}'), $COMPOSE_VERSION"
echo "image:      $GPCNN_DOCKER_IMAGE, $((size / 1000000)) MB"
printf 'timing:     %s\n' "${TIMINGS[@]}"
