#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# e2e.sh [BUILD_DIR] — distributed training throughput (examples/s) through the whole product:
# a real coordinator and real workers on loopback run the Fashion-MNIST MLP and CNN (global
# batch 128, Adam) and the DTensor tutorial's sentiment MLP (TF-IDF of 1200 tokens -> 48 -> batch
# norm -> 2, global batch 64, Adam, on the UCI Sentiment Labelled Sentences fetched by
# deploy/fetch-sentiment.sh) with 1 worker x 1 device, 1 worker x 2 devices and 2 workers x 1
# device; the figure is the job's training rate from its examples_per_sec metric: the steps of
# every epoch over their time (each epoch's last point is its mean rate), the first epoch left out
# when the job has three or more, else the first epoch's first 5 steps (the warm-up: the first
# step also waits for the other workers to load their data and join the data plane, 0.2-2.6 s in
# a 2-worker job), training only, evaluation excluded.
# Beside it, PyTorch DistributedDataParallel (gloo, 2 processes x 1 thread, the global batch split
# in two) on the same models and data, measured in the same run (sentiment: the same sentences,
# a TF-IDF over the 1200 most frequent tokens computed with numpy; BatchNorm1d per process, as DDP
# does by default). Both get the same OPENBLAS_CORETYPE. Installs python3-torch when missing
# (root + apt-get). The sentiment row is skipped, saying why, when the npm registry is not
# reachable. Never run by ctest.
# Env: E2E_STEPS_MLP (default 300), E2E_STEPS_CNN (default 80), E2E_STEPS_TEXT (default 300);
# E2E_MODELS (default "mlp cnn text"): the rows to run; E2E_DDP=0 skips the PyTorch column;
# E2E_REPEAT (default 1): run each row that many times (rows of noisy machines, side by side),
# then print each row's medians and 2 workers x 1 over 1 worker x 1 from them.
set -euo pipefail
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
SMLP=${E2E_STEPS_MLP:-300}
SCNN=${E2E_STEPS_CNN:-80}
STEXT=${E2E_STEPS_TEXT:-300}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_blas_env
bench_workdir e2e
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, one BLAS thread per device; load: $(cut -d' ' -f1-3 /proc/loadavg)"

bench_coordinator "$BUILD"
WPIDS=()
workers() { # workers N DEVICES: replace the running workers
    for p in "${WPIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    WPIDS=()
    for i in $(seq "$1"); do
        "$BUILD/meshtrain-worker" --coordinator "$URL" --devices "$2" --name "b$RANDOM$i" \
            --data-root /usr/share/datasets --data-root "$T/text" \
            2>>"$T/workers.log" &
        WPIDS+=($!)
        PIDS+=($!)
    done
    bench_wait_workers "$1"
}
rate() { # rate EXAMPLE STEPS MESH -> examples/s of the job (its last examples_per_sec point)
    local batch=128
    [ "$1" = dtensor_mlp_data_parallel.json ] && batch=64
    sed -e 's/"batch_size": *[0-9]*/"batch_size": '"$batch"'/' -e '0,/{/s//{"steps": '"$2"',/' \
        -e 's#"data/sentiment_#"'"$T"'/text/sentiment_#g' \
        -e '/"epochs":/d' -e '/"checkpoint":/d' \
        "$SRC/examples/$1" >"$T/job.json"
    local job
    job=$(mt submit "$T/job.json" --mesh "$3" --name bench)
    mt watch --json "$job" >"$T/points" || { echo "job $job failed:" >&2; mt status "$job" >&2; exit 1; }
    # each epoch's last point is that epoch's mean rate; the job's rate is steps over their time
    # (the first epoch, with its warm-up, left out when there are three or more; otherwise its
    # first W steps: a point's rate is the epoch's examples so far over their time, so the steps
    # after the W-th took k / last - W / rate_W of that time)
    jq -rR 'fromjson? | select(.name == "examples_per_sec") | "\(.epoch) \(.step) \(.value)"' \
        "$T/points" | awk -v W=5 '!($1 in last) { order[++n] = $1; first[$1] = $2 - 1 }
        { last[$1] = $3; st[$1] = $2; if ($2 - first[$1] == W) rw[$1] = $3 }
        END { prev = 0; for (i = 1; i <= n; i++) { e = order[i]; k = st[e] - prev; prev = st[e];
                  if (n > 2 && i == 1) continue; u = k / last[e];
                  if (i == 1 && (e in rw) && k > 4 * W) { k -= W; u -= W / rw[e] }
                  s += k; t += u }
              printf "%.0f\n", s / t }'
}

PY=${TORCH_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
if ! "$PY" -c 'import torch' 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q python3-torch >/dev/null 2>&1 || true
fi
cat >"$T/ddp.py" <<'PY'
import collections, gzip, os, re, sys, time
import numpy as np
import torch, torch.distributed as dist, torch.multiprocessing as mp
def load_text(path):
    labels, docs = [], []
    for line in open(path, encoding="utf-8"):
        lab, _, text = line.rstrip("\n").partition("\t")
        labels.append(int(lab))
        docs.append(re.findall(r"[a-z0-9']+", text.lower()))
    return docs, labels
def tfidf(docs, max_tokens=1200):
    counts = collections.Counter(t for d in docs for t in d)
    vocab = {t: i for i, (t, _) in enumerate(counts.most_common(max_tokens))}
    x = np.zeros((len(docs), len(vocab)), np.float32)
    for r, d in enumerate(docs):
        for t in d:
            if t in vocab:
                x[r, vocab[t]] += 1
    df = (x > 0).sum(0)
    return x * np.log(1 + len(docs) / (1 + df)).astype(np.float32)
def load(kind):
    if kind == "text":
        docs, labels = load_text(os.environ["E2E_TEXT_TRAIN"])
        return torch.tensor(tfidf(docs)), torch.tensor(labels, dtype=torch.long)
    d = "/usr/share/datasets/fashion-mnist/"
    x = np.frombuffer(gzip.open(d + "train-images-idx3-ubyte.gz").read(), np.uint8, offset=16)
    y = np.frombuffer(gzip.open(d + "train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
    return torch.tensor(x.reshape(-1, 1, 28, 28) / 255.0, dtype=torch.float32), torch.tensor(y, dtype=torch.long)
def model(kind):
    nn = torch.nn
    if kind == "text":
        return nn.Sequential(nn.Linear(1200, 48), nn.ReLU(), nn.BatchNorm1d(48), nn.Linear(48, 2))
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 64), nn.ReLU(), nn.Linear(64, 10))
def run(rank, kind, steps, port, q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    x, y = load(kind)
    m = torch.nn.parallel.DistributedDataParallel(model(kind))
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    glob = 64 if kind == "text" else 128
    per = glob // 2
    def step(i):
        j = (i * glob + rank * per) % (x.shape[0] - glob)
        opt.zero_grad()
        loss_fn(m(x[j:j + per]), y[j:j + per]).backward()
        opt.step()
    for i in range(10):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    dist.barrier()
    if rank == 0:
        q.put(round(glob * steps / (time.perf_counter() - t0)))
    dist.destroy_process_group()
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    ps = [ctx.Process(target=run, args=(r, sys.argv[1], int(sys.argv[2]), port, q)) for r in range(2)]
    for p in ps: p.start()
    print(q.get())
    for p in ps: p.join()
PY
ddp_rate() { # mlp|cnn|text STEPS -> examples/s of DDP, 2 processes x 1 thread
    E2E_TEXT_TRAIN="$T/text/sentiment_train.tsv" "$PY" "$T/ddp.py" "$1" "$2"
}
rows="mlp:fashion_mnist_mlp.json:$SMLP cnn:fashion_mnist_cnn.json:$SCNN"
if [ -s "$SRC/examples/data/sentiment_train.tsv" ] && [ -s "$SRC/examples/data/sentiment_test.tsv" ]; then
    mkdir -p "$T/text" && cp "$SRC/examples/data/sentiment_"*.tsv "$T/text/"
fi
if [ -s "$T/text/sentiment_train.tsv" ] || "$SRC/deploy/fetch-sentiment.sh" "$T/text" >/dev/null 2>&1; then
    rows="$rows text:dtensor_mlp_data_parallel.json:$STEXT"
else
    echo "sentiment row skipped: deploy/fetch-sentiment.sh failed (npm registry not reachable?)"
fi

printf "%-4s %16s %16s %16s %16s %12s %8s\n" model "1 worker x 1" "1 worker x 2" "2 workers x 1" \
    "torch DDP 2x1" "2x1 / DDP" scaling
want=" ${E2E_MODELS:-mlp cnn text} "
for m in $rows; do
    IFS=: read -r name job steps <<<"$m"
    [[ $want == *" $name "* ]] || continue
    for _ in $(seq "${E2E_REPEAT:-1}"); do
        workers 1 1
        r11=$(rate "$job" "$steps" batch=1)
        workers 1 2
        r12=$(rate "$job" "$steps" batch=2)
        workers 2 1
        r21=$(rate "$job" "$steps" batch=2)
        if [ "${E2E_DDP:-1}" != 0 ] && "$PY" -c 'import torch' 2>/dev/null; then
            ddp=$(ddp_rate "$name" "$steps")
            ratio=$(awk -v a="$r21" -v b="$ddp" 'BEGIN { printf "%.2fx", a / b }')
        else
            ddp="n/a" ratio="n/a"
        fi
        scal=$(awk -v a="$r12" -v b="$r11" 'BEGIN { printf "%.0f%%", 100 * a / (2 * b) }')
        printf "%-4s %16s %16s %16s %16s %12s %8s  load %s\n" "$name" "$r11" "$r12" "$r21" "$ddp" \
            "$ratio" "$scal" "$(cut -d' ' -f1 /proc/loadavg)"
        echo "$name $r11 $r12 $r21" >>"$T/rounds"
    done
done
echo "global batch 128 (mlp, cnn) and 64 (text); scaling 1 -> 2 devices is r12 / (2 x r11) on this"
echo "2-core machine shared with other work"
if [ "${E2E_REPEAT:-1}" -gt 1 ] && [ -s "$T/rounds" ]; then
    # single rounds swing by tens of percent on a shared machine: the rows' medians, and
    # 2 workers x 1 over 1 worker x 1 from them
    echo "medians over ${E2E_REPEAT} rounds (examples/s): 1 x 1, 1 x 2, 2 x 1, 2 x 1 / 1 x 1"
    for name in $(awk '{ print $1 }' "$T/rounds" | uniq); do
        med() { awk -v n="$name" -v c="$1" '$1 == n { print $c }' "$T/rounds" | sort -n |
            awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
        m11=$(med 2) m12=$(med 3) m21=$(med 4)
        printf "%-4s %16.0f %16.0f %16.0f %8.2f\n" "$name" "$m11" "$m12" "$m21" \
            "$(awk -v a="$m21" -v b="$m11" 'BEGIN { print a / b }')"
    done
fi
