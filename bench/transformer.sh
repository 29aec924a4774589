#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# transformer.sh [BUILD_DIR] — the char-level GPT of examples/char_lm.json (4 blocks, 4 heads,
# block 128, AdamW; width and batch settable) in one run, two groups of rows:
#  torch    training tokens/s against PyTorch on the same model and batch:
#           * meshtrain `train --local` on 1 device (OPENBLAS_NUM_THREADS=1) vs PyTorch in one
#             process with 1 thread;
#           * meshtrain on 2 devices (mesh batch=2, each device one OpenBLAS thread) and on
#             batch=1,model=2 (tensor parallel) vs PyTorch with 2 threads (the cores here).
#           meshtrain's figure is the run's examples_per_sec (training only) times the block
#           size; PyTorch runs the same layers (nn.Embedding, nn.MultiheadAttention with a causal
#           mask, nn.LayerNorm, nn.Linear, GELU, dropout 0.1) on random tokens, timing STEPS
#           steps after 3 warm-up steps.
#  scaling  1 -> 2 devices as jobs on a local cluster (a coordinator and fresh workers of one
#           device each, one OpenBLAS thread): 1 worker (mesh batch=1) against 2 workers with
#           mesh batch=2 (data parallel) and batch=1,model=2 (tensor parallel: QKV and the
#           first MLP kernel on their output axis, the projections on their input axis). Per
#           row, over the steps from the 2nd to the last but one (the workers' /metrics, read
#           while the job runs): the step time the workers measure (wall), the user and system
#           CPU seconds per step of each worker process (/proc/PID/stat), and the seconds per
#           step a worker spends inside collectives (meshtrain_worker_collective_seconds);
#           then the speedups: wall (the acceptance's figure, at the load printed) and CPU (the
#           1-device row's user CPU per step over the busiest worker's: what the step would
#           scale by on two free cores; steadier on a shared host). Also the FLOPs per step
#           and, from `meshtrain plan`, the bytes each device hands to collectives per step.
# Needs examples/data from deploy/fetch-corpus.sh (fetched when missing) and, for the torch
# rows, Debian's python3-torch (installed when missing, as root).
# Env: TRANSFORMER_STEPS (default 30), TRANSFORMER_WIDTH (default 128, the example's; heads
# stay 4, so 512 gives heads of 128), TRANSFORMER_BATCH (default 32), TRANSFORMER_ROWS
# ("torch scaling", the default, or either).
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${TRANSFORMER_STEPS:-30}
WIDTH=${TRANSFORMER_WIDTH:-128}
BATCH=${TRANSFORMER_BATCH:-32}
ROWS=${TRANSFORMER_ROWS:-torch scaling}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
if [[ $ROWS == *torch* ]] && ! $PY -c 'import torch' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "transformer.sh: needs python3-torch (apt-get install python3-torch)"; exit 1; }
    apt-get install -y -q python3-torch >/dev/null
fi
bash "$SRC/deploy/fetch-corpus.sh" "$SRC/examples/data" >/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_workdir transformer
load() { cut -d' ' -f1-3 /proc/loadavg; }
TP='{"qkv_.*kernel":["unsharded","model"],"fc_.*kernel":["unsharded","model"],"fc_.*bias":["model"],"proj_.*kernel":["model","unsharded"],"out_.*kernel":["model","unsharded"]}'

spec() { # OUT MESH LAYOUTS_JSON DATA_PREFIX: the example at WIDTH and BATCH, no test split
    $PY - "$SRC/examples/char_lm.json" "$@" "$WIDTH" "$BATCH" "$STEPS" <<'PY'
import json, sys
src, out, mesh, layouts, prefix, w, b, steps = sys.argv[1:9]
w = int(w)
s = json.load(open(src))
s["mesh"] = {k: int(v) for k, v in (kv.split("=") for kv in mesh.split(","))}
s["layouts"] = json.loads(layouts)
s["batch_size"], s["steps"] = int(b), int(steps)
s["dataset"]["train"] = prefix + s["dataset"]["train"]
s["dataset"].pop("test")
for l in s["model"]["layers"]:
    n = l.get("name", "")
    if l["type"] == "embedding":
        l["output_dim"] = w
    elif n.startswith("qkv_"):
        l["units"] = 3 * w
    elif n.startswith("fc_"):
        l["units"] = 4 * w
    elif n.startswith(("proj_", "out_")):
        l["units"] = w
json.dump(s, open(out, "w"))
PY
}

ours() { # MESH LAYOUTS_JSON -> tokens/s (train --local)
    spec "$T/spec.json" "$1" "$2" "$SRC/examples/"
    (cd "$T" && "$BUILD/meshtrain" train --local spec.json --json --data-root / | tail -n 1 |
        $PY -c 'import json,sys; print(round(json.load(sys.stdin)["examples_per_sec"] * 128))')
}

theirs() { # THREADS -> tokens/s
    $PY - "$1" "$STEPS" "$WIDTH" "$BATCH" <<'PY'
import sys, time, torch, torch.nn as nn
torch.set_num_threads(int(sys.argv[1]))
steps, C, B = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
V, H, L, T = 96, 4, 4, 128
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(C, eps=1e-3), nn.LayerNorm(C, eps=1e-3)
        s.attn = nn.MultiheadAttention(C, H, batch_first=True)
        s.fc, s.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x, m):
        h = s.ln1(x)
        x = x + s.attn(h, h, h, attn_mask=m, need_weights=False)[0]
        return x + s.out(nn.functional.gelu(s.fc(s.ln2(x))))
class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, C), nn.Parameter(torch.zeros(T, C))
        s.drop, s.blocks = nn.Dropout(0.1), nn.ModuleList(Block() for _ in range(L))
        s.lnf, s.head = nn.LayerNorm(C, eps=1e-3), nn.Linear(C, V)
    def forward(s, x, m):
        h = s.drop(s.tok(x) + s.pos)
        for b in s.blocks:
            h = b(h, m)
        return s.head(s.lnf(h))
m = GPT()
opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.01)
mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
def step():
    opt.zero_grad()
    loss = nn.functional.cross_entropy(m(x, mask).reshape(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
for _ in range(3):
    step()
t = time.perf_counter()
for _ in range(steps):
    step()
print(round(steps * B * T / (time.perf_counter() - t)))
PY
}

echo "width $WIDTH (4 heads, block 128), batch $BATCH, $STEPS steps per row; start load $(load)"
# FLOPs of one training step (forward + backward: 3x the forward's multiply-adds x 2), the
# dense layers and the causal attention products (about half of T x T per head and example)
$PY - "$WIDTH" "$BATCH" <<'PY'
import sys
C, B, T, L, V = int(sys.argv[1]), int(sys.argv[2]), 128, 4, 96
dense = 2 * 3 * B * T * (L * 12 * C * C + C * V)
attn = 2 * 3 * B * L * 2 * (T * T // 2) * C
params = V * C + T * C + L * (12 * C * C + 10 * C) + 2 * C + C * V + V
print(f"per step: {(dense + attn) / 1e9:.1f} GFLOP ({dense / 1e9:.1f} in the dense layers), "
      f"{params:,} parameters")
PY
for m in "batch=2 {}" "batch=1,model=2 $TP"; do
    spec "$T/plan.json" "${m%% *}" "${m#* }" "$SRC/examples/"
    echo "plan ${m%% *}: $("$BUILD/meshtrain" plan --offline "$T/plan.json" |
        sed -n 's/^per step *to collectives, per device: */to collectives per device and step: /p')"
done

if [[ $ROWS == *torch* ]]; then
    a=$(ours batch=1 '{}')
    b=$(theirs 1)
    printf '%-44s %10s %10s %7s  load %s\n' "row" meshtrain pytorch ratio "$(load)"
    printf '%-44s %10s %10s %7.2f  load %s\n' "1 device vs PyTorch 1 thread (tokens/s)" "$a" "$b" \
        "$(echo "$a / $b" | bc -l)" "$(load)"
    c=$(ours batch=2 '{}')
    d=$(theirs 2)
    printf '%-44s %10s %10s %7.2f  load %s\n' "batch=2 vs PyTorch 2 threads" "$c" "$d" \
        "$(echo "$c / $d" | bc -l)" "$(load)"
    e=$(ours batch=1,model=2 "$TP")
    printf '%-44s %10s %10s %7.2f  load %s\n' "batch=1,model=2 (tensor parallel) vs 2 threads" \
        "$e" "$d" "$(echo "$e / $d" | bc -l)" "$(load)"
    printf 'train --local, 1 -> 2 devices (threads of one process): data parallel %.2fx, tensor parallel %.2fx\n' \
        "$(echo "$c / $a" | bc -l)" "$(echo "$e / $a" | bc -l)"
fi
[[ $ROWS == *scaling* ]] || exit 0

# -- scaling: jobs on a local cluster, fresh workers of one device per row ----------------------
bench_coordinator "$BUILD"
WPIDS=() MURLS=()
HZ=$(getconf CLK_TCK)
workers() { # N: fresh workers of 1 device, their /metrics URLs in MURLS
    local i p
    for p in "${WPIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    WPIDS=() MURLS=()
    for i in $(seq "$1"); do
        "$BUILD/meshtrain-worker" --coordinator "$URL" --devices 1 --name "s$RANDOM$i" \
            --data-root "$SRC/examples" --metrics-listen 127.0.0.1:0 >"$T/w$i.log" 2>&1 &
        WPIDS+=($!)
        PIDS+=($!)
    done
    for i in $(seq "$1"); do
        for _ in $(seq 100); do grep -q 'metrics on http' "$T/w$i.log" && break; sleep 0.1; done
        MURLS+=("$(grep -o 'http://[0-9.:]*/metrics' "$T/w$i.log" | head -n 1)")
    done
    bench_wait_workers "$1"
}
sample() { # per worker: steps step_seconds_sum collective_seconds_sum utime stime (ticks)
    local i
    for i in "${!WPIDS[@]}"; do
        curl -s "${MURLS[$i]}" | awk -v st="$(awk '{print $14, $15}' "/proc/${WPIDS[$i]}/stat")" '
            /^meshtrain_worker_step_seconds_count / { n = $2 }
            /^meshtrain_worker_step_seconds_sum / { s = $2 }
            /^meshtrain_worker_collective_seconds_sum/ { c += $2 }
            END { printf "%d %.6f %.6f %s\n", n, s, c, st }'
    done
}
failed() { # JOB: exit when it failed
    if mt status --json "$1" | jq -e '.state | IN("FAILED", "CANCELLED")' >/dev/null; then
        echo "job $1: $(mt status "$1")" >&2
        exit 1
    fi
}
steps_done() { curl -s "${MURLS[0]}" | awk '/^meshtrain_worker_step_seconds_count / { print $2 }'; }
cluster() { # NWORKERS MESH LAYOUTS -> $T/res: "wall_per_step user_max user_sum sys_sum coll_per_step load"
    # (in this shell, not a $(...): it keeps the workers' pids)
    local job s0 s1 n l i
    workers "$1"
    spec "$T/job.json" "$2" "$3" "$SRC/examples/"
    job=$(mt submit "$T/job.json" --name "bench-$2")
    # poll twice a second: a curl and an awk 20 times a second took a tenth of a core from the
    # workers (their compute threads waited on the run queue)
    for i in $(seq 600); do
        n=$(steps_done)
        [ "${n:-0}" -ge 2 ] && break
        [ $((i % 4)) = 0 ] && failed "$job"
        sleep 0.5
    done
    s0=$(sample)
    for i in $(seq 1200); do
        n=$(steps_done)
        [ "${n:-0}" -ge $((STEPS - 1)) ] && break
        [ $((i % 4)) = 0 ] && failed "$job"
        sleep 0.5
    done
    s1=$(sample)
    l=$(load)
    for _ in $(seq 1200); do
        mt status --json "$job" | jq -e '.state | IN("SUCCEEDED", "FAILED", "CANCELLED")' >/dev/null && break
        sleep 0.1
    done
    mt status --json "$job" | jq -e '.state == "SUCCEEDED"' >/dev/null ||
        { echo "job $job: $(mt status "$job")" >&2; exit 1; }
    paste -d' ' <(echo "$s0") <(echo "$s1") | awk -v hz="$HZ" -v l="$l" '
        { dn = $6 - $1; wall += ($7 - $2) / dn; coll += ($8 - $3) / dn
          u = ($9 - $4) / hz / dn; us += u; if (u > um) um = u; ss += ($10 - $5) / hz / dn; k++ }
        END { printf "%.3f %.3f %.3f %.3f %.3f %s\n", wall / k, um, us, ss, coll / k, l }' >"$T/res"
}
printf '%-38s %9s %11s %10s %9s %10s  %s\n' "scaling row (per step)" "wall s" "user CPU s" \
    "(sum)" "sys s" "in coll s" "load"
row() { # LABEL RESULT
    read -r w um us ss co l1 l2 l3 <<<"$2"
    printf '%-38s %9s %11s %10s %9s %10s  %s %s %s\n' "$1" "$w" "$um" "$us" "$ss" "$co" "$l1" "$l2" "$l3"
}
cluster 1 batch=1 '{}'
one=$(cat "$T/res")
row "1 worker x 1 device (batch=1)" "$one"
cluster 2 batch=2 '{}'
dp=$(cat "$T/res")
row "2 workers x 1 device, batch=2" "$dp"
cluster 2 batch=1,model=2 "$TP"
tp=$(cat "$T/res")
row "2 workers x 1 device, batch=1,model=2" "$tp"
for r in "data parallel|$dp" "tensor parallel|$tp"; do
    echo "${r#*|}" | awk -v a="$one" -v what="${r%%|*}" '
        { split(a, o, " "); printf "scaling 1 -> 2 devices, %s: wall %.2fx, CPU %.2fx (total CPU %.2fx of 1 device)\n",
          what, o[1] / $1, o[2] / $2, $3 / o[3] }'
done
echo "end load $(load)"
