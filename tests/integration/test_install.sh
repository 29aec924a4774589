# SPDX-License-Identifier: MIT
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# test_install.sh — `cmake --install` into a fresh prefix puts the programs,
# man pages (or --help text), docs, example specs, deploy templates and the
# systemd units (ExecStart rewritten to the prefix) where cmake/install.cmake
# promises; the installed programs run from there.
source "$(dirname "$0")/lib.sh"

P=$T/prefix
cmake --install "$BIN" --prefix "$P" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install"; }

for p in meshtrain meshtrain-coordinator meshtrain-worker; do
    [ -x "$P/bin/$p" ] || fail "bin/$p missing or not executable"
    "$P/bin/$p" --version | grep -qx "$p [0-9.]*" || fail "installed $p --version"
    if [ -e "$P/share/man/man1/$p.1" ]; then # help2man was found at configure time
        grep -q '^\.TH' "$P/share/man/man1/$p.1" || fail "$p.1 is not a man page"
        sed 's/\\//g' "$P/share/man/man1/$p.1" >"$T/$p.man"
        grep -q -- '--help' "$T/$p.man" || fail "$p.1 lacks the options"
    else
        [ -s "$P/share/doc/meshtrain/$p.txt" ] || fail "neither $p.1 nor $p.txt installed"
        cp "$P/share/doc/meshtrain/$p.txt" "$T/$p.man"
    fi
done
grep -q -- '--heartbeat-timeout-ms' "$T/meshtrain-coordinator.man" || fail "coordinator options not documented"

for f in "$SRC"/docs/*.md "$SRC/README.md"; do
    cmp -s "$f" "$P/share/doc/meshtrain/$(basename "$f")" || fail "doc $(basename "$f") not installed"
done
n=0
for f in "$SRC"/examples/*.json; do
    jq -e . "$P/share/meshtrain/examples/$(basename "$f")" >/dev/null ||
        fail "example $(basename "$f") missing or not JSON"
    n=$((n + 1))
done
[ $n -ge 1 ] || fail "no example specs in the source tree"

for f in systemd/meshtrain.env docker/Dockerfile docker/compose.yml slurm/meshtrain.sbatch \
    slurm/meshtrain-mpi.sbatch grafana/meshtrain.json; do
    [ -s "$P/share/meshtrain/deploy/$f" ] || fail "deploy template $f missing"
done
ls "$P"/share/meshtrain/deploy/k8s/*.yaml >/dev/null 2>&1 || fail "k8s manifests missing"

for u in meshtrain-coordinator meshtrain-worker; do
    f=$P/lib/systemd/system/$u.service
    [ -s "$f" ] || fail "unit $u.service missing"
    grep -q "^ExecStart=$P/bin/$u " "$f" || fail "$u.service ExecStart not rewritten to $P/bin"
    ! grep -q /usr/local/bin "$f" || fail "$u.service still names /usr/local/bin"
done

# DESTDIR staging (as packagers do) lands under DESTDIR, units name the prefix
DESTDIR=$T/stage cmake --install "$BIN" --prefix /opt/mt >"$T/stage.log" 2>&1 || fail "DESTDIR install"
[ -x "$T/stage/opt/mt/bin/meshtrain-worker" ] || fail "DESTDIR: binary not staged"
grep -q '^ExecStart=/opt/mt/bin/meshtrain-worker ' "$T/stage/opt/mt/lib/systemd/system/meshtrain-worker.service" ||
    fail "DESTDIR: unit should name /opt/mt/bin"

# the installed coordinator runs from the prefix
BIN=$P/bin start_coordinator coord "$T/state" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0
[ "$(curl -sf "$HTTP_URL/healthz")" = ok ] || fail "installed coordinator /healthz"
log "installed tree: $(find "$P" -type f | wc -l) files; PASS"
