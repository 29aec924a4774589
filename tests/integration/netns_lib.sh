# SPDX-License-Identifier: MIT
# netns_lib.sh — two workers' machines as network namespaces, for partition tests
# (test_fault_partition.sh, bench/fault_matrix.sh). Source after lib.sh.
#   netns_up            create namespaces $NA, $NB: each reaches the root namespace (the
#                       coordinator at $NET_CA / $NET_CB) over its own veth pair, and the other
#                       over a third pair (data plane: $NET_DA in $NA, $NET_DB in $NB). Returns 1
#                       with the reason in $NETNS_WHY when this host does not allow it.
#   netns_cut / netns_heal   take the data link down / up (both workers keep reaching the
#                       coordinator: a partition between the workers only)
#   netns_worker NAME NS DATA_ADDR [FLAGS...]   a worker in NS, in its own UTS namespace with
#                       host name NAME-host (so two workers never share memory as one host),
#                       its data plane on tcp://DATA_ADDR:0
#   netns_down          delete everything netns_up made (idempotent)
NETNS_WHY=""

netns_up() {
    NS=mtp$$
    NA=${NS}a NB=${NS}b
    # 10.P.0.0/16: the first from the pid on that no address of this host uses (parallel runs)
    local k
    for k in $(seq 0 199); do
        P=$((10 + ($$ + k) % 200))
        ip -o addr | grep -q " 10\.$P\." || break
    done
    command -v ip >/dev/null || { NETNS_WHY="no ip(8)"; return 1; }
    if ! ip netns add "$NA" 2>"$T/netns.err"; then
        NETNS_WHY="network namespaces not permitted here: $(cat "$T/netns.err")"
        return 1
    fi
    if ! ip netns add "$NB" 2>"$T/netns.err" ||
        ! ip netns exec "$NA" unshare --uts true 2>"$T/netns.err"; then
        NETNS_WHY="a second network namespace or a UTS namespace: $(cat "$T/netns.err")"
        netns_down
        return 1
    fi
    ip link add "${NS}ca" type veth peer name ca netns "$NA"
    ip link add "${NS}cb" type veth peer name cb netns "$NB"
    ip link add ab netns "$NA" type veth peer name ba netns "$NB"
    ip addr add "10.$P.1.1/24" dev "${NS}ca"
    ip addr add "10.$P.2.1/24" dev "${NS}cb"
    ip link set "${NS}ca" up
    ip link set "${NS}cb" up
    local n ns cdev caddr gw ddev daddr
    for n in "$NA:ca:10.$P.1.2:10.$P.1.1:ab:10.$P.3.1" "$NB:cb:10.$P.2.2:10.$P.2.1:ba:10.$P.3.2"; do
        IFS=: read -r ns cdev caddr gw ddev daddr <<<"$n"
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$caddr/24" dev "$cdev"
        ip -n "$ns" link set "$cdev" up
        ip -n "$ns" route add default via "$gw"
        ip -n "$ns" addr add "$daddr/24" dev "$ddev"
        ip -n "$ns" link set "$ddev" up
    done
    NET_CA=10.$P.1.1 NET_CB=10.$P.2.1 NET_DA=10.$P.3.1 NET_DB=10.$P.3.2
}

netns_cut() { ip -n "$NA" link set ab down; }
netns_heal() { ip -n "$NA" link set ab up; }

netns_worker() {
    local name=$1 ns=$2 addr=$3
    shift 3
    bg "$name" ip netns exec "$ns" unshare --uts sh -c "hostname $name-host && exec \"\$0\" \"\$@\"" \
        "$BIN/meshtrain-worker" --coordinator "$COORD_URL" --devices 1 --name "$name" \
        --data-listen "tcp://$addr:0" "$@"
}

netns_down() {
    [ -n "${NS:-}" ] || return 0
    ip netns del "$NA" 2>/dev/null || true
    ip netns del "$NB" 2>/dev/null || true
    ip link del "${NS}ca" 2>/dev/null || true
    ip link del "${NS}cb" 2>/dev/null || true
}
