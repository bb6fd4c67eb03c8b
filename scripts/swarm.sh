#!/usr/bin/env bash
# A real multi-node Docker Swarm on this one machine, for terminus's swarm tests: a manager and
# N workers (3 by default), each its own dockerd in its own network namespace on a private
# bridge (10.77.0.0/24, no route out), every daemon's API on TCP with TLS client certificates
# (a CA made here; `env` names the client's), and a registry (Debian's docker-registry) in the
# manager's namespace. Nothing here touches the machine's own dockerd or its iptables.
#
#   scripts/swarm.sh up [--workers N]   # bring the cluster up (idempotent); prints its settings
#   scripts/swarm.sh env                # the settings as shell assignments (TERMINUS_SWARM_*)
#   scripts/swarm.sh status             # the nodes as the manager sees them
#   scripts/swarm.sh stop-node wK       # SIGKILL worker K's dockerd (a node lost)
#   scripts/swarm.sh start-node wK      # start it again (it rejoins the swarm)
#   scripts/swarm.sh down               # remove everything: daemons, namespaces, mounts, cgroups, data
#   scripts/swarm.sh test               # up, the swarm integration tests, down
#
# Containers on the nodes reach no daemon API, swarm port or registry (iptables in each node's
# namespace), and the registry takes only clients with the bed's certificates.
#
# Needs root and Debian's docker.io (scripts/setup.sh installs it). Facts behind the recipe
# (nsenter instead of `ip netns exec` on cgroup v1, a UTS namespace per node) are in
# docs/SCALE-OUT.md.
set -euo pipefail
cd "$(dirname "$0")/.."

NET=10.77.0
STATE=/run/terminus-swarm
DATA=/var/lib/terminus-swarm
PORT=2376
REGISTRY_PORT=5000
BASE_IMAGE=terminus-base:bookworm
SWITCH=tsw-switch

log() { printf '[swarm] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, dockerd)"

workers() { cat "$STATE/workers" 2>/dev/null || echo 3; }
nodes() { echo m; for k in $(seq 1 "$(workers)"); do echo "w$k"; done; }
addr() { case "$1" in m) echo "$NET.10" ;; w*) echo "$NET.$((10 + ${1#w}))" ;; esac; }
ns() { echo "tsw-$1"; }
sock() { echo "$STATE/$1.sock"; }
d() { local node=$1; shift; docker -H "unix://$(sock "$node")" "$@"; }
answers() { d "$1" version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; }

# The dockerd of one node, in its namespaces (run as: nsenter --net=… unshare --mount --uts …).
write_inner() {
    cat >"$STATE/node-inner.sh" <<'EOF'
#!/bin/sh
# Inside a node's network namespace and a mount and UTS namespace of its own: a sysfs of this
# network namespace (dockerd reads its interfaces there) with the cgroup v1 mounts kept under it
# (`ip netns exec` would hide them), the node's own host name, then its dockerd.
set -e
NODE=$1; ADDR=$2; BIP=$3; STATE=$4; DATA=$5; PORT=$6
CERTS="$STATE/certs"
mkdir -p "$STATE/$NODE/cg" "$STATE/$NODE/exec" "$DATA/$NODE"
mount --make-rslave /
mount --rbind /sys/fs/cgroup "$STATE/$NODE/cg"
mount -t sysfs sysfs /sys
mount --rbind "$STATE/$NODE/cg" /sys/fs/cgroup
umount -l "$STATE/$NODE/cg"
hostname "tsw-$NODE"
exec /usr/sbin/dockerd \
    --data-root "$DATA/$NODE" --exec-root "$STATE/$NODE/exec" --pidfile "$STATE/$NODE.pid" \
    -H "unix://$STATE/$NODE.sock" -H "tcp://$ADDR:$PORT" \
    --tlsverify --tlscacert "$CERTS/ca.pem" --tlscert "$CERTS/$NODE-cert.pem" --tlskey "$CERTS/$NODE-key.pem" \
    --bip "$BIP" --cgroup-parent "/terminus-swarm-$NODE" \
    --swarm-default-advertise-addr "$ADDR" \
    --config-file "$STATE/daemon.json"
EOF
    chmod +x "$STATE/node-inner.sh"
}

# A CA, a server certificate per node (its address and name), and a client certificate: what a
# real cluster's daemons and orchestrator would hold.
make_certs() {
    local dir="$STATE/certs" node
    [ -f "$dir/cert.pem" ] && return 0
    command -v openssl >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq openssl >/dev/null; }
    mkdir -p "$dir"
    (
        cd "$dir"
        openssl genrsa -out ca-key.pem 2048 2>/dev/null
        openssl req -x509 -new -key ca-key.pem -days 7 -subj "/CN=terminus swarm test bed CA" -out ca.pem 2>/dev/null
        for node in $(nodes); do
            openssl genrsa -out "$node-key.pem" 2048 2>/dev/null
            openssl req -new -key "$node-key.pem" -subj "/CN=tsw-$node" -out "$node.csr" 2>/dev/null
            printf 'subjectAltName=IP:%s,DNS:tsw-%s\nextendedKeyUsage=serverAuth\n' "$(addr "$node")" "$node" >"$node.ext"
            openssl x509 -req -in "$node.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 7 \
                -extfile "$node.ext" -out "$node-cert.pem" 2>/dev/null
        done
        openssl genrsa -out key.pem 2048 2>/dev/null
        openssl req -new -key key.pem -subj "/CN=terminus" -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 7 \
            -extfile client.ext -out cert.pem 2>/dev/null
        rm -f ./*.csr ./*.ext
    )
}

start_node() {
    local node=$1 n bip
    answers "$node" && return 0
    case "$node" in m) n=10 ;; w*) n=$((10 + ${node#w})) ;; esac
    bip="172.30.$n.1/24"
    rm -f "$STATE/$node.pid" "$(sock "$node")"
    # nsenter and unshare exec without forking: $! is dockerd's pid.
    setsid nsenter --net="/run/netns/$(ns "$node")" \
        unshare --mount --uts --propagation slave \
        "$STATE/node-inner.sh" "$node" "$(addr "$node")" "$bip" "$STATE" "$DATA" "$PORT" \
        >"$STATE/$node.log" 2>&1 </dev/null &
    echo $! >"$STATE/$node.launcher"
}

wait_node() {
    local node=$1
    for _ in $(seq 1 120); do
        answers "$node" && return 0
        sleep 0.5
    done
    tail -20 "$STATE/$node.log" >&2 || true
    die "node $node's dockerd did not answer within 60 s (log: $STATE/$node.log)"
}

network_up() {
    ip netns list | grep -qw "$SWITCH" && return 0
    ip netns add "$SWITCH"
    ip -n "$SWITCH" link set lo up
    ip -n "$SWITCH" link add tswbr0 type bridge
    ip -n "$SWITCH" link set tswbr0 up
    # The host's own leg, so the orchestrator reaches every node; the nodes get no route out.
    ip link add tsw-host type veth peer name host-br netns "$SWITCH"
    ip addr add "$NET.1/24" dev tsw-host
    ip link set tsw-host up
    ip -n "$SWITCH" link set host-br master tswbr0 up
    for node in $(nodes); do
        ip netns add "$(ns "$node")"
        ip link add "tsw-$node" type veth peer name eth0 netns "$(ns "$node")"
        ip link set "tsw-$node" netns "$SWITCH"
        ip -n "$SWITCH" link set "tsw-$node" master tswbr0 up
        ip -n "$(ns "$node")" link set lo up
        ip -n "$(ns "$node")" addr add "$(addr "$node")/24" dev eth0
        ip -n "$(ns "$node")" link set eth0 up
    done
}

registry_up() {
    local pidfile="$STATE/registry.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
    command -v docker-registry >/dev/null 2>&1 || {
        log "installing Debian's docker-registry"
        DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq docker-registry >/dev/null
    }
    mkdir -p "$DATA/registry"
    cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DATA/registry
  delete:
    enabled: true
http:
  addr: $(addr m):$REGISTRY_PORT
  # TLS with client certificates: only holders of the bed's certificates (the daemons, which
  # find theirs in /etc/docker/certs.d) may pull or push; a trial container holds none.
  tls:
    certificate: $STATE/certs/m-cert.pem
    key: $STATE/certs/m-key.pem
    clientcas:
      - $STATE/certs/ca.pem
EOF
    local certs_d="/etc/docker/certs.d/$(addr m):$REGISTRY_PORT"
    mkdir -p "$certs_d"
    cp "$STATE/certs/ca.pem" "$certs_d/ca.crt"
    cp "$STATE/certs/cert.pem" "$certs_d/client.cert"
    cp "$STATE/certs/key.pem" "$certs_d/client.key"
    setsid nsenter --net="/run/netns/$(ns m)" docker-registry serve "$STATE/registry.yml" \
        >"$STATE/registry.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 1 40); do
        nsenter --net="/run/netns/$(ns m)" bash -c "exec 3<>/dev/tcp/$(addr m)/$REGISTRY_PORT" 2>/dev/null && return 0
        sleep 0.25
    done
    die "the registry did not listen (log: $STATE/registry.log)"
}

# What a real cluster's nodes must provide (docs/SCALE-OUT.md): containers reach no daemon API,
# swarm port or registry. In each node's namespace, those ports answer only the nodes' own
# network, and nothing a container sends is forwarded to a node.
firewall() {
    local node in_rule fwd_rule
    in_rule="-p tcp -m multiport --dports $PORT,2377,7946,$REGISTRY_PORT ! -s $NET.0/24 -j DROP"
    fwd_rule="-d $NET.0/24 -j DROP"
    for node in $(nodes); do
        # shellcheck disable=SC2086
        nsenter --net="/run/netns/$(ns "$node")" iptables -C INPUT $in_rule 2>/dev/null \
            || nsenter --net="/run/netns/$(ns "$node")" iptables -I INPUT $in_rule
        # shellcheck disable=SC2086
        nsenter --net="/run/netns/$(ns "$node")" iptables -C DOCKER-USER $fwd_rule 2>/dev/null \
            || nsenter --net="/run/netns/$(ns "$node")" iptables -I DOCKER-USER $fwd_rule
    done
}

print_env() {
    cat <<EOF
TERMINUS_SWARM_MANAGER=tcp://$(addr m):$PORT
TERMINUS_SWARM_MANAGER_SOCKET=unix://$(sock m)
TERMINUS_SWARM_NODE_PORT=$PORT
TERMINUS_SWARM_TLS_DIR=$STATE/certs
TERMINUS_SWARM_REGISTRY=$(addr m):$REGISTRY_PORT
TERMINUS_SWARM_WORKERS=$(workers)
TERMINUS_SWARM_SCRIPT=$PWD/scripts/swarm.sh
EOF
}

up() {
    local n=3
    while [ $# -gt 0 ]; do
        case "$1" in
            --workers) n=$2; shift 2 ;;
            *) die "usage: $0 up [--workers N]" ;;
        esac
    done
    [ "$n" -ge 1 ] || die "--workers must be at least 1"
    scripts/setup.sh >&2
    mkdir -p "$STATE" "$DATA"
    if [ -f "$STATE/workers" ] && [ "$(workers)" != "$n" ]; then
        die "a cluster of $(workers) workers is up; run '$0 down' first"
    fi
    echo "$n" >"$STATE/workers"
    echo '{}' >"$STATE/daemon.json"
    write_inner
    make_certs
    network_up
    for node in $(nodes); do start_node "$node"; done
    for node in $(nodes); do wait_node "$node"; done
    firewall
    if [ "$(d m info --format '{{.Swarm.LocalNodeState}}')" != active ]; then
        log "swarm init on the manager"
        d m swarm init --advertise-addr "$(addr m)" --listen-addr "$(addr m):2377" \
            --default-addr-pool 10.78.0.0/16 --default-addr-pool-mask-length 24 >/dev/null
    fi
    local token
    token=$(d m swarm join-token -q worker)
    for node in $(nodes); do
        [ "$node" = m ] && continue
        if [ "$(d "$node" info --format '{{.Swarm.LocalNodeState}}')" != active ]; then
            d "$node" swarm join --advertise-addr "$(addr "$node")" --listen-addr "$(addr "$node"):2377" \
                --token "$token" "$(addr m):2377" >/dev/null
        fi
    done
    registry_up
    # The manager builds task images: it needs their base image, as a real cluster's builder
    # would get it from its registry.
    if ! d m image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        log "loading $BASE_IMAGE into the manager"
        docker save "$BASE_IMAGE" | d m load -q >/dev/null
    fi
    for _ in $(seq 1 40); do
        [ "$(d m node ls --format '{{.Status}}' | grep -c Ready)" = "$((n + 1))" ] && break
        sleep 0.25
    done
    d m node ls >&2
    print_env
}

down() {
    [ -d "$STATE" ] || [ -d "$DATA" ] || ip netns list | grep -q '^tsw-' || { log "nothing is up"; return 0; }
    local node pid
    for node in m $(seq 1 16 | sed 's/^/w/'); do
        [ -S "$(sock "$node")" ] && d "$node" swarm leave --force >/dev/null 2>&1 || true
    done
    for pidfile in "$STATE"/*.pid "$STATE"/*.launcher; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
    done
    # The daemons stop their containers first; then whatever is left is killed.
    for _ in $(seq 1 60); do
        pgrep -f "$STATE/" >/dev/null 2>&1 || break
        sleep 0.5
    done
    pkill -9 -f "$STATE/" 2>/dev/null || true
    # Containers' shims of killed daemons, and anything else still in the nodes' namespaces.
    for n in $(ip netns list | awk '/^tsw-/{print $1}'); do
        for pid in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    done
    sleep 0.5
    for n in $(ip netns list | awk '/^tsw-/{print $1}'); do ip netns del "$n" 2>/dev/null || true; done
    ip link del tsw-host 2>/dev/null || true
    # Mounts left by the daemons (overlays, netns files, shm) below the state and data dirs.
    for dir in "$STATE" "$DATA"; do
        { grep -o " $dir[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    done
    for cg in /sys/fs/cgroup/*/terminus-swarm-*; do
        [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    rm -rf "$STATE" "$DATA" "/etc/docker/certs.d/$(addr m):$REGISTRY_PORT"
    if ! ip netns list | grep -q . && mountpoint -q /run/netns; then
        umount /run/netns 2>/dev/null && rmdir /run/netns 2>/dev/null || true
    fi
    log "down: no namespace, daemon, mount, cgroup or data dir is left"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    env) print_env ;;
    status) d m node ls ;;
    stop-node)
        node=${2:?which node (wK)}
        kill -9 "$(cat "$STATE/$node.pid")"
        log "killed $node's dockerd" ;;
    start-node)
        node=${2:?which node (wK)}
        start_node "$node"; wait_node "$node"; firewall
        log "$node's dockerd is back" ;;
    down) down ;;
    test)
        shift
        trap down EXIT
        eval "$(up "$@" | sed 's/^/export /')"
        cargo build --release --quiet --bin terminus
        TERMINUS_REQUIRE_DOCKER=1 TERMINUS_REQUIRE_SWARM=1 \
            cargo test --release --test integration swarm:: -- --test-threads=1
        ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
