#!/usr/bin/env bash
# ctest: lane 2 (daemons, but no deadline or timing check: may run beside a daemon test)
# SPDX-License-Identifier: MIT
# test_deb.sh — the .deb packages (packaging/deb/build-debs.sh, `make deb`) from this build:
#  * three packages, each with its program, man page and copyright; the units and the dashboard
#    in the daemons' packages; no file in two packages, and together every file
#    `cmake --install` puts under /usr; Depends from dpkg-shlibdeps (libnng1 ...) and
#    libjs-chart.js for the coordinator;
#  * installed with dpkg into a temporary root (its own dpkg database; maintainer scripts
#    chrootless, so they see DPKG_ROOT and leave the host's systemd alone): dpkg lists them
#    installed, the installed coordinator (serving the installed dashboard) and worker run a
#    2-step job submitted with the installed CLI to SUCCEEDED; removal leaves no file.
source "$(dirname "$0")/lib.sh"
for t in dpkg dpkg-deb dpkg-shlibdeps; do
    command -v $t >/dev/null || fail "$t not installed (Debian package dpkg-dev; deploy/install-deps.sh)"
done

bash "$SRC/packaging/deb/build-debs.sh" "$BIN" "$T/out" >"$T/debs.txt" 2>"$T/debs.err" ||
    fail "build-debs.sh: $(cat "$T/debs.err")"
V=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BIN/CMakeCache.txt")
A=$(dpkg --print-architecture)
for p in meshtrain meshtrain-coordinator meshtrain-worker; do
    deb=$T/out/${p}_${V}_$A.deb
    [ -s "$deb" ] || fail "no $deb: $(cat "$T/debs.txt")"
    dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./||' | grep -v '/$' | sort >"$T/$p.files"
    for f in "usr/bin/$p" "usr/share/man/man1/$p.1.gz" "usr/share/doc/$p/copyright"; do
        grep -qx "$f" "$T/$p.files" || fail "$p lacks $f: $(cat "$T/$p.files")"
    done
    dpkg-deb -f "$deb" Depends | grep -q 'libnng1' || fail "$p Depends: $(dpkg-deb -f "$deb" Depends)"
done
grep -qx usr/lib/systemd/system/meshtrain-coordinator.service "$T/meshtrain-coordinator.files" ||
    fail "coordinator unit not in meshtrain-coordinator"
grep -qx usr/lib/systemd/system/meshtrain-worker.service "$T/meshtrain-worker.files" ||
    fail "worker unit not in meshtrain-worker"
grep -qx usr/share/meshtrain/dashboard/index.html "$T/meshtrain-coordinator.files" ||
    fail "dashboard not in meshtrain-coordinator"
dpkg-deb -f "$T/out/meshtrain-coordinator_${V}_$A.deb" Depends | grep -q 'libjs-chart.js' ||
    fail "meshtrain-coordinator does not depend on libjs-chart.js"
grep -q 'usr/share/meshtrain/examples/fashion_mnist_mlp.json' "$T/meshtrain.files" || fail "examples"
# no file in two packages; together every installed file (copyrights and gzip aside)
dup=$(sort "$T"/*.files | uniq -d)
[ -z "$dup" ] || fail "files in two packages: $dup"
DESTDIR=$T/stage cmake --install "$BIN" --prefix /usr >/dev/null 2>&1 || fail "cmake --install"
(cd "$T/stage" && find . -type f | sed 's|^\./||; s|\(man1/.*\.1\)$|\1.gz|' | sort) >"$T/installed"
missing=$(sort "$T"/*.files | comm -13 - "$T/installed")
[ -z "$missing" ] || fail "installed but in no package: $missing"
log "3 packages: $(wc -l <"$T/meshtrain.files") + $(wc -l <"$T/meshtrain-coordinator.files") +" \
    "$(wc -l <"$T/meshtrain-worker.files") files, none twice, none missing"

# ---- install into a temporary root with its own dpkg database
R=$T/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/var/lib/dpkg/triggers" "$R/var/log"
: >"$R/var/lib/dpkg/status"
dpkg --root="$R" --force-depends --force-script-chrootless --force-not-root \
    -i "$T/out"/*.deb >"$T/dpkg-install.log" 2>&1 || fail "dpkg -i: $(cat "$T/dpkg-install.log")"
[ "$(dpkg --root="$R" -l 'meshtrain*' | grep -c '^ii')" = 3 ] ||
    fail "not installed: $(dpkg --root="$R" -l 'meshtrain*')"
U=$R/usr/bin
"$U/meshtrain" --version | grep -qx "meshtrain $V" || fail "installed meshtrain --version"

S=$T/state
bg coord "$U/meshtrain-coordinator" --state-dir "$S" --listen tcp://127.0.0.1:0 --http 127.0.0.1:0 \
    --dashboard-dir "$R/usr/share/meshtrain/dashboard"
wait_for 20 "installed coordinator up" test -s "$S/endpoints.json"
COORD=$(jq -r .rpc "$S/endpoints.json")
HTTP=$(jq -r .http "$S/endpoints.json")
bg worker "$U/meshtrain-worker" --coordinator "$COORD" --name deb-w1 --devices 2
wait_for 20 "installed worker registers" bash -c "'$U/meshtrain' --coordinator '$COORD' workers --state alive | grep -q '^deb-w1 '"
jq '. + {steps: 2} | del(.epochs)' "$R/usr/share/meshtrain/examples/fashion_mnist_mlp.json" >"$T/job.json"
timeout 300 "$U/meshtrain" --coordinator "$COORD" submit --wait "$T/job.json" >"$T/submit.out" 2>&1 ||
    fail "job on the installed programs: $(cat "$T/submit.out")"
grep -q 'SUCCEEDED' "$T/submit.out" || fail "job: $(cat "$T/submit.out")"
curl -sf "$HTTP/" | grep -q '<title>meshtrain: jobs</title>' || fail "installed dashboard not served"
log "installed programs: a job SUCCEEDED on the installed coordinator + worker; dashboard served"

dpkg --root="$R" --force-script-chrootless --force-not-root -r meshtrain-coordinator meshtrain-worker \
    meshtrain >"$T/dpkg-remove.log" 2>&1 || fail "dpkg -r: $(cat "$T/dpkg-remove.log")"
left=$(find "$R" -path "$R/var" -prune -o -type f -print | head -5)
[ -z "$left" ] || fail "files left after removal: $left"
echo "test_deb: ok"
