# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_deploy_files.sh — the deployment files are valid and their command
# lines run:
#   systemd: `systemd-analyze verify` of the installed units (any output fails),
#     `systemd-analyze security` exposure under 3.0, and each unit's ExecStart,
#     expanded from its Environment= defaults + deploy/systemd/meshtrain.env the
#     way systemd does, starts a coordinator and a worker that registers; and
#     docs/deploy.md's `sqlite3 .backup` of the live database is consistent;
#   Docker: dockerfile-utils lint (any output fails), stage/user checks, the
#     runtime stage's packages cover every library the programs need, and the
#     HEALTHCHECK command run against a live coordinator (and a stopped one);
#   compose.yml and deploy/k8s/*.yaml: deploy_lint.js (kubernetes-models@4
#     schemas, flags against --help, token/volume/probe wiring), plus
#     negative cases that must fail for the expected reason; the workers'
#     compose healthcheck and k8s readiness commands run against a live
#     coordinator (pass for an alive worker, fail for a missing one);
#   Slurm: bash -n and shellcheck.
# The npm tools (pinned) are installed once into ~/.cache/meshtrain/; without
# npm or the registry those steps print SKIP and the rest still runs.
source "$(dirname "$0")/lib.sh"

P=$T/prefix
cmake --install "$BIN" --prefix "$P" >"$T/install.log" 2>&1 || fail "cmake --install"
for p in meshtrain meshtrain-coordinator meshtrain-worker; do "$BIN/$p" --help >"$T/$p.txt"; done

# ---------------------------------------------------------------- systemd
if command -v systemd-analyze >/dev/null; then
    out=$(MANPATH=$P/share/man systemd-analyze verify "$P"/lib/systemd/system/meshtrain-*.service 2>&1) ||
        fail "systemd-analyze verify failed: $out"
    [ -z "$out" ] || fail "systemd-analyze verify printed: $out"
    for u in meshtrain-coordinator meshtrain-worker; do
        systemd-analyze security --offline=yes --threshold=30 \
            "$P/lib/systemd/system/$u.service" >"$T/security-$u.txt" 2>&1 ||
            { tail -n 3 "$T/security-$u.txt"; fail "$u.service exposure above 3.0"; }
        log "systemd: $u.service verified; $(grep -o 'exposure level.*' "$T/security-$u.txt")"
    done
else
    echo "SKIP systemd-analyze verify: systemd-analyze not installed"
fi

# unit_argv UNIT ENVFILE: ExecStart of UNIT expanded as systemd would, one
# argument per line: Environment= defaults, then ENVFILE (overrides), then
# STATE_DIRECTORY / CREDENTIALS_DIRECTORY from the caller's environment;
# ${X} substitutes in place, a lone $X splits into words; %H is the host name.
unit_argv() {
    local unit=$1 envfile=$2 line k v w
    declare -A E=()
    while IFS= read -r line; do
        line=${line#Environment=}
        E[${line%%=*}]=${line#*=}
    done < <(grep '^Environment=' "$unit")
    while IFS= read -r line; do
        case $line in '#'* | '') continue ;; esac
        E[${line%%=*}]=${line#*=}
    done <"$envfile"
    E[STATE_DIRECTORY]=$STATE_DIRECTORY
    E[CREDENTIALS_DIRECTORY]=$CREDENTIALS_DIRECTORY
    local exec
    exec=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$unit" | sed 's/\\$//' | tr '\n' ' ')
    exec=${exec#ExecStart=}
    for w in $exec; do
        if [[ $w =~ ^\$([A-Za-z_][A-Za-z0-9_]*)$ ]]; then
            k=${BASH_REMATCH[1]}
            [ -n "${E[$k]+set}" ] || fail "$unit: \$$k has no default"
            for v in ${E[$k]}; do printf '%s\n' "$v"; done
            continue
        fi
        while [[ $w =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]]; do
            k=${BASH_REMATCH[1]}
            [ -n "${E[$k]+set}" ] || fail "$unit: \${$k} has no default"
            w=${w//"\${$k}"/${E[$k]}}
        done
        printf '%s\n' "${w//%H/$(hostname)}"
    done
}
export STATE_DIRECTORY=$T/unit-state CREDENTIALS_DIRECTORY=$T/creds
mkdir -p "$STATE_DIRECTORY" "$CREDENTIALS_DIRECTORY"
(umask 077 && head -c 24 /dev/urandom | base64 >"$CREDENTIALS_DIRECTORY/token")
chmod 0400 "$CREDENTIALS_DIRECTORY/token" # as LoadCredential= hands it over
cp "$SRC/deploy/systemd/meshtrain.env" "$T/env"
cat >>"$T/env" <<'EOT'
MESHTRAIN_LISTEN=tcp://127.0.0.1:0
MESHTRAIN_HTTP=127.0.0.1:0
MESHTRAIN_HEARTBEAT_MS=200
MESHTRAIN_WORKER_ARGS=--devices 3 --rpc-timeout-ms 2000
EOT
mapfile -t CARGV < <(unit_argv "$P/lib/systemd/system/meshtrain-coordinator.service" "$T/env")
[ "${CARGV[0]}" = "$P/bin/meshtrain-coordinator" ] || fail "coordinator ExecStart: ${CARGV[*]}"
bg unit-coord "${CARGV[@]}"
UCOORD=$LAST_PID
wait_for 20 "coordinator started from its unit's ExecStart" test -s "$STATE_DIRECTORY/endpoints.json"
COORD_URL=$(jq -r .rpc "$STATE_DIRECTORY/endpoints.json")
HTTP_URL=$(jq -r .http "$STATE_DIRECTORY/endpoints.json")
[ "$(curl -sf "$HTTP_URL/healthz")" = ok ] || fail "unit coordinator /healthz"
echo "MESHTRAIN_COORDINATOR=$COORD_URL" >>"$T/env"
mapfile -t WARGV < <(unit_argv "$P/lib/systemd/system/meshtrain-worker.service" "$T/env")
bg unit-worker "${WARGV[@]}"
unit_worker() {
    mt --token-file "$CREDENTIALS_DIRECTORY/token" workers --json |
        jq -e --arg n "$(hostname)" '.workers[] | select(.name == $n and .state == "alive") |
            (.devices | length) == 3 and .data_address == "tcp://worker-1.example.net:7500"'
}
wait_for 20 "worker from its unit's ExecStart registers (name %H, 3 devices)" unit_worker
log "systemd: ExecStart lines run: coordinator + worker '$(hostname)' registered with the token"

# docs/deploy.md's online backup while the coordinator runs
if command -v sqlite3 >/dev/null; then
    (cd "$STATE_DIRECTORY" && sqlite3 meshtrain.db ".backup $T/backup.db") || fail "sqlite3 .backup"
    [ "$(sqlite3 "$T/backup.db" 'PRAGMA integrity_check')" = ok ] || fail "backup integrity_check"
    sqlite3 "$T/backup.db" 'SELECT name FROM workers' | grep -qx "$(hostname)" ||
        fail "backup lacks the registered worker"
    log "sqlite3 .backup of the live database: integrity ok, worker present"
else
    echo "SKIP backup check: sqlite3 not installed"
fi

# ---------------------------------------------------------------- npm tools
# pinned versions; the install is shared by every build tree of this user
NODE_PKGS="dockerfile-utils@0.16.3 js-yaml@4.1.0 kubernetes-models@4.5.1"
NODE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/meshtrain/deploy-lint-$(echo "$NODE_PKGS" | cksum | cut -d' ' -f1)
have_node=0
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "SKIP Dockerfile lint, compose and Kubernetes validation: npm/node not installed"
elif [ -x "$NODE_DIR/node_modules/.bin/dockerfile-utils" ]; then
    have_node=1
else
    # install into a fresh directory, then rename: a concurrent run never sees half
    tmp=$(mktemp -d "${NODE_DIR}.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$NODE_DIR")" && mktemp -d "${NODE_DIR}.tmp.XXXXXX"; })
    # shellcheck disable=SC2086 # NODE_PKGS is a list
    if timeout 180 npm install --no-audit --no-fund --loglevel=error --fetch-retries=1 \
        --fetch-timeout=30000 --prefix "$tmp" $NODE_PKGS >"$T/npm.log" 2>&1; then
        mv -T "$tmp" "$NODE_DIR" 2>/dev/null || rm -rf "$tmp" # lost a race: use the winner's
        have_node=1
    else
        rm -rf "$tmp"
        echo "SKIP Dockerfile lint, compose and Kubernetes validation: npm install of" \
            "$NODE_PKGS failed (registry unreachable?): $(tail -n 2 "$T/npm.log")"
    fi
fi

DF=$SRC/deploy/docker/Dockerfile
# structure checks need no tools
[ "$(grep -c '^FROM debian:12' "$DF")" = 2 ] || fail "Dockerfile: want two debian:12 stages"
grep -q '^FROM debian:12.* AS runtime$' "$DF" || fail "Dockerfile: last stage is not 'runtime'"
sed -n '/AS runtime$/,$p' "$DF" | grep -q -- '-dev\b' && fail "Dockerfile: -dev package in the runtime stage"
sed -n '/AS runtime$/,$p' "$DF" | grep -q '^USER meshtrain$' || fail "Dockerfile: runtime not non-root"
grep -q 'deploy/install-deps.sh' "$DF" || fail "Dockerfile: build stage does not use install-deps.sh"
# what the dashboard and the shipped examples need at run time
for pkg in libjs-chart.js dataset-fashion-mnist; do
    sed -n '/AS runtime$/,$p' "$DF" | grep -qw -- "$pkg" || fail "Dockerfile: runtime stage lacks $pkg"
done
# every shared library the programs load directly comes from a package the
# runtime stage installs (checked against this Debian machine's packages)
if command -v dpkg >/dev/null && command -v readelf >/dev/null; then
    RT_PKGS=$(sed -n '/AS runtime$/,/rm -rf/p' "$DF" | tr ' \\' '\n\n' | grep -E '^lib|^zlib' | sort -u)
    LDCACHE=$(ldconfig -p)
    declare -A LIB_PATHS=() OWNER=()
    for p in meshtrain meshtrain-coordinator meshtrain-worker; do
        for lib in $(readelf -d "$BIN/$p" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            path=$(echo "$LDCACHE" | awk -v l="$lib" '$1 == l && !f { print $NF; f = 1 }')
            real=$(readlink -f "$path")
            # usrmerge: dpkg may know the file under /lib or /usr/lib
            LIB_PATHS[$lib]="$path $real ${real#/usr} /usr$real"
        done
    done
    # one dpkg query for every candidate path (slow per call): "pkg:arch: /path"
    # shellcheck disable=SC2046 # the candidate lists are words
    while IFS= read -r line; do
        OWNER[${line##*: }]=${line%%:*}
    done < <(dpkg -S $(printf '%s ' "${LIB_PATHS[@]}") 2>/dev/null || true)
    for lib in "${!LIB_PATHS[@]}"; do
        pkg=""
        for c in ${LIB_PATHS[$lib]}; do
            [ -n "${OWNER[$c]:-}" ] && { pkg=${OWNER[$c]}; break; }
        done
        [ -n "$pkg" ] || fail "no Debian package owns $lib (${LIB_PATHS[$lib]})"
        case $pkg in # in debian:12-slim already / sanitizer runtimes of `make asan`
            libc6 | libgcc-s1 | libasan* | libubsan* | libtsan* | liblsan*) continue ;;
        esac
        grep -qx "$pkg" <<<"$RT_PKGS" ||
            fail "Dockerfile runtime stage lacks $pkg (for $lib); it has: ${RT_PKGS//$'\n'/ }"
    done
    log "Dockerfile: runtime packages cover the programs' libraries (${RT_PKGS//$'\n'/ })"
fi
if [ $have_node = 1 ]; then
    out=$("$NODE_DIR/node_modules/.bin/dockerfile-utils" lint "$DF" 2>&1) || fail "dockerfile-utils: $out"
    [ -z "$out" ] || fail "dockerfile-utils lint printed: $out"
    # the HEALTHCHECK command, run here against the unit coordinator's port
    NODE_PATH=$NODE_DIR/node_modules node -e '
        const s = require("fs").readFileSync(process.argv[1], "utf8").replace(/\\\n/g, " ");
        const m = s.match(/^HEALTHCHECK .*? CMD (\[.*\])\s*$/m);
        for (const a of JSON.parse(m[1])) console.log(a);' "$DF" >"$T/hc.txt" ||
        fail "no JSON HEALTHCHECK CMD in the Dockerfile"
    mapfile -t HC <"$T/hc.txt"
    MESHTRAIN_HTTP_PORT=${HTTP_URL##*:} "${HC[@]}" || fail "HEALTHCHECK command failed on a live coordinator"
    kill -STOP "$UCOORD"
    # kill returns before a process running on the other core has stopped: wait until every
    # thread is in state T
    stopped() { ! awk '{ print $3 }' /proc/"$UCOORD"/task/*/stat | grep -qv '^T$'; }
    wait_for 5 "the coordinator stopped" stopped
    ! MESHTRAIN_HTTP_PORT=${HTTP_URL##*:} timeout 3 "${HC[@]}" 2>/dev/null || fail "HEALTHCHECK passed on a stopped coordinator"
    kill -CONT "$UCOORD"
    log "Dockerfile: dockerfile-utils clean; HEALTHCHECK ok live, fails when stopped"

    K8S=("$SRC"/deploy/k8s/*.yaml)
    NODE_PATH=$NODE_DIR/node_modules node "$SRC/tests/integration/deploy_lint.js" "$T" \
        "$SRC/deploy/docker/compose.yml" "${K8S[@]}" | tee "$T/lint.txt" || fail "deploy_lint.js"
    # the worker health commands of compose.yml and worker.yaml, run against the
    # unit coordinator: true for the alive worker named $(hostname), false for another
    NODE_PATH=$NODE_DIR/node_modules node -e '
        const y = require("js-yaml"), fs = require("fs");
        const c = y.load(fs.readFileSync(process.argv[1], "utf8"));
        const w = c["x-worker"] || c.services["worker-1"];
        console.log(w.healthcheck.test[1].replace(/\$\$/g, "$"));
        for (const d of y.loadAll(fs.readFileSync(process.argv[2], "utf8")))
            if (d && d.kind === "StatefulSet")
                console.log(d.spec.template.spec.containers[0].readinessProbe.exec.command[2]);' \
        "$SRC/deploy/docker/compose.yml" "$SRC/deploy/k8s/worker.yaml" >"$T/probes.txt" ||
        fail "cannot read the worker health commands"
    [ "$(wc -l <"$T/probes.txt")" = 2 ] || fail "want 2 worker health commands: $(cat "$T/probes.txt")"
    sed -i -e "s|/run/secrets/meshtrain_token|$CREDENTIALS_DIRECTORY/token|g" \
        -e "s|/run/meshtrain/token|$CREDENTIALS_DIRECTORY/token|g" \
        -e "s|tcp://meshtrain-coordinator:7400|$COORD_URL|g" -e 's|^meshtrain |"$BIN/meshtrain" |' "$T/probes.txt"
    probe() { BIN=$BIN MESHTRAIN_COORDINATOR=$COORD_URL POD_NAME=$2 bash -c "hostname() { echo \"$2\"; }; $1"; }
    while IFS= read -r cmd; do
        wait_for 15 "worker health command passes: $cmd" probe "$cmd" "$(hostname)"
        ! probe "$cmd" no-such-worker || fail "worker health command passes for a missing worker: $cmd"
    done <"$T/probes.txt"
    log "compose healthcheck and k8s readiness commands: pass for an alive worker, fail otherwise"

    # negative cases: the checks must catch these
    mkdir -p "$T/bad"
    sed 's/type: Recreate/type: RollingUpdate/' "$SRC/deploy/k8s/coordinator.yaml" >"$T/bad/c1.yaml"
    sed 's/            - --state-dir/            - --state-directory/' "$SRC/deploy/k8s/coordinator.yaml" >"$T/bad/c2.yaml"
    sed 's/containerPort: 7400/containerPort: rpc-port/' "$SRC/deploy/k8s/coordinator.yaml" >"$T/bad/c3.yaml"
    sed 's/defaultMode: 0400/defaultMode: 0444/' "$SRC/deploy/k8s/worker.yaml" >"$T/bad/w1.yaml"
    sed 's/prometheus.io\/scrape: "true"/prometheus.io\/scrape: "false"/' "$SRC/deploy/k8s/coordinator.yaml" >"$T/bad/c4.yaml"
    sed 's/claimName: meshtrain-datasets/claimName: meshtrain-state/' "$SRC/deploy/k8s/worker.yaml" >"$T/bad/w2.yaml"
    sed 's/prometheus.io\/port: "9101"/prometheus.io\/port: "9102"/' "$SRC/deploy/k8s/worker.yaml" >"$T/bad/w3.yaml"
    sed 's/      - worker-2$/      - worker-1/' "$SRC/deploy/docker/compose.yml" >"$T/bad/compose.yml"
    for bad in c1 c2 c3 c4 w1 w2 w3; do
        cmp -s "$T/bad/$bad.yaml" "$SRC/deploy/k8s/${bad:0:1}"*.yaml && fail "negative case $bad did not change anything"
        ! NODE_PATH=$NODE_DIR/node_modules node "$SRC/tests/integration/deploy_lint.js" "$T" \
            "$SRC/deploy/docker/compose.yml" "$T/bad/$bad.yaml" "$SRC/deploy/k8s/secret.yaml" "$SRC/deploy/k8s/datasets.yaml" \
            "$([ "${bad:0:1}" = c ] && echo "$SRC/deploy/k8s/worker.yaml" || echo "$SRC/deploy/k8s/coordinator.yaml")" \
            >"$T/bad/$bad.out" || fail "broken manifest $bad passed"
    done
    ! NODE_PATH=$NODE_DIR/node_modules node "$SRC/tests/integration/deploy_lint.js" "$T" \
        "$T/bad/compose.yml" "${K8S[@]}" >"$T/bad/compose.out" || fail "duplicate compose worker names passed"
    # ... and for the right reason
    grep -q 'strategy must be Recreate' "$T/bad/c1.out" || fail "c1: $(cat "$T/bad/c1.out")"
    grep -q 'has no option --state-directory' "$T/bad/c2.out" || fail "c2: $(cat "$T/bad/c2.out")"
    grep -q 'containerPort must be integer' "$T/bad/c3.out" || fail "c3: $(cat "$T/bad/c3.out")"
    grep -q 'not mounted with defaultMode 0400' "$T/bad/w1.out" || fail "w1: $(cat "$T/bad/w1.out")"
    grep -q 'no Prometheus scrape annotations' "$T/bad/c4.out" || fail "c4: $(cat "$T/bad/c4.out")"
    grep -q 'meshtrain-datasets is not mounted read-only at /data' "$T/bad/w2.out" || fail "w2: $(cat "$T/bad/w2.out")"
    grep -q 'no --metrics-listen with a metrics port' "$T/bad/w3.out" || fail "w3: $(cat "$T/bad/w3.out")"
    grep -q 'duplicate worker name' "$T/bad/compose.out" || fail "compose: $(cat "$T/bad/compose.out")"
    log "compose + k8s: $(grep -c '^ok' "$T/lint.txt") checks ok; 8 broken variants rejected"
fi

# ---------------------------------------------------------------- Slurm
for f in meshtrain.sbatch meshtrain-mpi.sbatch; do # the MPI one runs in test_mpi_job.sh
    bash -n "$SRC/deploy/slurm/$f" || fail "$f: bash -n"
done
if command -v shellcheck >/dev/null; then
    shellcheck -s bash "$SRC/deploy/slurm/meshtrain.sbatch" || fail "shellcheck meshtrain.sbatch"
    shellcheck -s bash "$SRC/deploy/slurm/meshtrain-mpi.sbatch" ||
        fail "shellcheck meshtrain-mpi.sbatch"
else
    echo "SKIP shellcheck: not installed"
fi

# the batch script itself, on loopback: stand-in scontrol/srun run each "node"
# (127.0.0.1 and 127.0.0.2, both loopback) as a local process
mkdir -p "$T/fakeslurm"
cat >"$T/fakeslurm/scontrol" <<'EOT'
#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf '%s\n' $FAKE_NODES
EOT
cat >"$T/fakeslurm/srun" <<'EOT'
#!/bin/bash
# srun [--opt=v | --nodelist=N ...] CMD ARGS: one CMD per node, SLURMD_NODENAME set
nodes=$FAKE_NODES
while [[ $1 == --* ]]; do
    case $1 in --nodelist=*) nodes=${1#--nodelist=} ;; esac
    shift
done
pids=()
for n in $nodes; do SLURMD_NODENAME=$n "$@" & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' TERM INT
wait
wait # a signal ends the first wait: like srun, return only once the tasks have ended
EOT
chmod +x "$T/fakeslurm/scontrol" "$T/fakeslurm/srun"
SLURM_OUT=$T/sbatch.out
# the job step: a few steps of the MLP (a spec without a mesh) over both "nodes": the script
# makes it data parallel over all 2 x 2 devices; ports are the script's defaults (free ones)
jq '. + {steps: 2} | del(.epochs)' "$SRC/examples/fashion_mnist_mlp.json" >"$T/slurm_job.json"
PATH=$T/fakeslurm:$BIN:$PATH FAKE_NODES="127.0.0.1 127.0.0.2" SLURM_JOB_ID=4242 \
    SLURM_JOB_NODELIST="fake[1-2]" SLURM_CPUS_PER_TASK=2 MESHTRAIN_STATE_DIR=$T/slurm-state \
    MESHTRAIN_BIND=127.0.0.1 MESHTRAIN_DATA_ROOTS="$T /usr/share/datasets" \
    timeout 120 bash "$SRC/deploy/slurm/meshtrain.sbatch" "$T/slurm_job.json" >"$SLURM_OUT" 2>&1 ||
    { cat "$SLURM_OUT"; fail "meshtrain.sbatch exited non-zero"; }
grep -q 'submitting .* --mesh batch=4 on 4 devices (2 nodes x 2)' "$SLURM_OUT" ||
    { cat "$SLURM_OUT"; fail "sbatch: the job does not use every device of the allocation"; }
grep -q 'coordinator on 127.0.0.1 (tcp://127.0.0.1:[1-9][0-9]*, dashboard http://127.0.0.1:[1-9]' "$SLURM_OUT" ||
    { cat "$SLURM_OUT"; fail "sbatch: no free ports read from endpoints.json"; }
grep -qE '^127\.0\.0\.1 +alive +2 cpu' "$SLURM_OUT" || { cat "$SLURM_OUT"; fail "sbatch: node 1 worker"; }
grep -qE '^127\.0\.0\.2 +alive +2 cpu' "$SLURM_OUT" || { cat "$SLURM_OUT"; fail "sbatch: node 2 worker"; }
grep -q 'submitting' "$SLURM_OUT" || fail "sbatch did not submit the job"
grep -qx 'job job-000001 SUCCEEDED' "$SLURM_OUT" || { cat "$SLURM_OUT"; fail "sbatch: the job did not succeed"; }
[ "$(stat -c %a "$T/slurm-state/token")" = 600 ] || fail "sbatch token mode"
sleep 0.5
! pgrep -f "$T/slurm-state" >/dev/null || fail "meshtrain.sbatch left processes: $(pgrep -af "$T/slurm-state")"
log "Slurm: sbatch script ran a coordinator + 2 'nodes' on loopback on free ports, the job on" \
    "all 4 devices, cleaned up"
log "PASS"
