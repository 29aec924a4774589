/* SPDX-License-Identifier: MIT */
/*
 * mt_seed_state.c — test helper: fills a coordinator state dir's database
 * through the store API with two workers (worker-a: 2 cpu devices, worker-b:
 * 2), a RUNNING job "mnist-dp" on a 2x2 mesh over all four devices with
 * metric history, checkpoints and a state history, a FAILED job with an error
 * and a QUEUED job, so the HTTP API, /metrics and the dashboard can be tested
 * and benchmarked without a training engine.
 * usage: mt_seed_state STATE_DIR [--steps N] [--names K] [--restart S] [--jobs N]
 *        mt_seed_state STATE_DIR --append JOB_ID --steps N [--interval-ms MS]
 *   --append    add N more steps of all five metrics to an existing job (after its
 *               current step), one step per MS milliseconds (default 50), each step
 *               one transaction, then set the job's step: a training job "live"
 *               while a coordinator serves the same database (tests the dashboard).
 *   --steps N   metric steps of the running job (default 200)
 *   --names K   metric names per step, 1..6 of loss, accuracy, examples_per_sec,
 *               test_loss, test_accuracy (test ones every 10th step; default 5), batch_loss
 *               (the last step's own loss around loss); --append adds the same K
 *   --jobs N    N more jobs after those (for listing tests and bench/list_jobs.sh): finished
 *               ones, SUCCEEDED / FAILED / CANCELLED in turn, priorities 0..2
 *   --restart S the running job lost worker-b at its last step and runs again as
 *               attempt 2, resumed from the checkpoint at step S (a restart marker)
 * Prints the running job's id. Used by tests/integration/test_http_api.sh,
 * test_dashboard.sh and bench/bench_http.c (which calls it as a library-free program).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock/mt_clock.h"
#include "storage/mt_store.h"

/* A valid job spec (the Fashion-MNIST MLP of examples/) named NAME, with EXTRA top-level
 * members. The coordinator revalidates specs when it restarts, so seeded jobs must be real. */
#define FMNIST "/usr/share/datasets/fashion-mnist/"
#define SEED_SPEC(NAME, EXTRA)                                                                     \
    "{\"name\":\"" NAME "\"," EXTRA "\"seed\":7,\"batch_size\":128,\"steps\":1000,"                \
    "\"optimizer\":\"adam\",\"learning_rate\":0.001,\"dataset\":{\"format\":\"idx\","              \
    "\"train_images\":\"" FMNIST "train-images-idx3-ubyte.gz\","                                   \
    "\"train_labels\":\"" FMNIST "train-labels-idx1-ubyte.gz\","                                   \
    "\"test_images\":\"" FMNIST "t10k-images-idx3-ubyte.gz\","                                     \
    "\"test_labels\":\"" FMNIST "t10k-labels-idx1-ubyte.gz\"},"                                    \
    "\"model\":{\"input_shape\":[28,28,1],\"layers\":[{\"type\":\"flatten\"},"                     \
    "{\"type\":\"dense\",\"units\":128,\"activation\":\"relu\"},"                                  \
    "{\"type\":\"dense\",\"units\":10}]}}"

static int check(mt_code rc, const mt_err *err, const char *what)
{
    if (rc != MT_OK) {
        fprintf(stderr, "mt_seed_state: %s: %s: %s\n", what, mt_code_name(rc), err->msg);
        return 1;
    }
    return 0;
}

static void worker(mt_store_worker *w, mt_store_device *d, const char *name, int64_t now)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->worker_id, sizeof(w->worker_id), "%s", name);
    snprintf(w->name, sizeof(w->name), "%s", name);
    snprintf(w->instance_id, sizeof(w->instance_id), "seed");
    snprintf(w->host, sizeof(w->host), "localhost");
    w->pid = 4242;
    snprintf(w->state, sizeof(w->state), "alive");
    snprintf(w->data_address, sizeof(w->data_address), "tcp://127.0.0.1:0");
    snprintf(w->version, sizeof(w->version), "0.1.0");
    w->registered_at_ms = now;
    w->last_heartbeat_ms = now;
    for (uint32_t i = 0; i < 2; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        snprintf(d[i].kind, sizeof(d[i].kind), "cpu");
        d[i].index = i;
        d[i].cores = 1;
        d[i].memory_bytes = 1u << 30;
        snprintf(d[i].health, sizeof(d[i].health), "ok");
    }
    w->devices = d;
    w->n_devices = 2;
}

static double value_of(int j, double t)
{
    return j == 0   ? 2.3 * exp(-t / 80.0) + 0.1 + 0.02 * sin(t)
           : j == 1 ? 1.0 - 0.9 * exp(-t / 60.0)
           : j == 2 ? 5000.0 + 100.0 * sin(t / 7.0)
           : j == 3 ? 2.3 * exp(-t / 90.0) + 0.15
           : j == 4 ? 0.95 - 0.85 * exp(-t / 70.0)
                    : 2.3 * exp(-t / 80.0) + 0.1 + 0.25 * sin(t * 1.7) * exp(-t / 400.0);
}

/* --append: grow job_id by `steps` steps, one transaction per step. */
static int append(const char *db, const char *job_id, long steps, long interval_ms, long k)
{
    static const char *const names[] = {"loss",      "accuracy",      "examples_per_sec",
                                        "test_loss", "test_accuracy", "batch_loss"};
    mt_err err = MT_ERR_INIT;
    mt_store *s = NULL;
    mt_store_job j;
    struct timespec pause = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};

    mt_store_options so = MT_STORE_OPTIONS_DEFAULTS;
    /* a running coordinator commits beside it (fsync each): on a loaded machine a commit can
     * hold the lock longer than the default 2 s, and a real writer would wait */
    so.busy_timeout_ms = 60000;
    if (check(mt_store_open_opts(db, &so, &s, &err), &err, db))
        return 1;
    if (check(mt_store_job_get(s, job_id, &j, &err), &err, job_id)) {
        mt_store_close(s);
        return 1;
    }
    mt_store_job_fini(&j);
    for (uint64_t st = j.step + 1; st <= j.step + (uint64_t)steps; st++) {
        mt_store_metric pts[6];
        size_t n = 0;
        for (int i = 0; i < k && i < 6; i++) {
            if ((i == 3 || i == 4) && st % 10 != 0)
                continue;
            memset(&pts[n], 0, sizeof(pts[n]));
            pts[n].step = st;
            snprintf(pts[n].name, sizeof(pts[n].name), "%s", names[i]);
            pts[n].value = value_of(i, (double)st);
            pts[n++].time_ms = mt_clock_wall_ms();
        }
        /* BEGIN IMMEDIATE takes the write lock first, waiting for it (busy_timeout_ms): a
         * call's own deferred transaction reads before it writes and fails at once with
         * "database is locked" when the coordinator committed in between (a stale snapshot) */
        if (check(mt_store_tx_begin(s, &err), &err, "begin") ||
            check(mt_store_metrics_insert(s, job_id, pts, n, &err), &err, "append metrics") ||
            check(mt_store_job_set_step(s, job_id, st, mt_clock_wall_ms(), &err), &err, "step") ||
            check(mt_store_tx_commit(s, &err), &err, "commit")) {
            mt_store_close(s);
            return 1;
        }
        nanosleep(&pause, NULL);
    }
    mt_store_close(s);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"loss",      "accuracy",      "examples_per_sec",
                                        "test_loss", "test_accuracy", "batch_loss"};
    long steps = 200, k = 5, interval_ms = 50, restart = 0, more = 0;
    const char *append_job = NULL;
    mt_err err = MT_ERR_INIT;
    mt_store *s = NULL;
    mt_store_worker w;
    mt_store_device d[2];
    mt_store_job run = {0}, failed = {0}, queued = {0};
    char db[1100];
    int64_t now = mt_clock_wall_ms();

    if (argc < 2) {
        fprintf(stderr, "usage: mt_seed_state STATE_DIR [--steps N] [--names K]\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0)
            steps = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--names") == 0)
            k = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--append") == 0)
            append_job = argv[i + 1];
        else if (strcmp(argv[i], "--interval-ms") == 0)
            interval_ms = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--restart") == 0)
            restart = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--jobs") == 0)
            more = strtol(argv[i + 1], NULL, 10);
    }
    if (steps < 1 || k < 1 || k > 6) {
        fprintf(stderr, "mt_seed_state: --steps >= 1, --names 1..6\n");
        return 2;
    }
    snprintf(db, sizeof(db), "%s/meshtrain.db", argv[1]);
    if (append_job != NULL)
        return append(db, append_job, steps, interval_ms < 0 ? 0 : interval_ms, k);
    mkdir(argv[1], 0700);
    mt_store_options o = MT_STORE_OPTIONS_DEFAULTS;
    o.sync_full = 0;
    if (check(mt_store_open_opts(db, &o, &s, &err), &err, db))
        return 1;
    int bad = 0;
    worker(&w, d, "worker-a", now);
    bad |= check(mt_store_worker_upsert(s, &w, &err), &err, "worker-a");
    worker(&w, d, "worker-b", now);
    bad |= check(mt_store_worker_upsert(s, &w, &err), &err, "worker-b");

    snprintf(run.name, sizeof(run.name), "mnist-dp");
    /* real, valid specs: the coordinator revalidates specs when it restarts */
    run.spec_json = SEED_SPEC("mnist-dp", "\"mesh\":{\"batch\":2,\"model\":2},"
                                          "\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\","
                                          "\"model\"],\"dense_2\\\\.kernel\":[\"model\","
                                          "\"unsharded\"]},");
    run.total_steps = (uint64_t)steps * 2;
    bad |= check(mt_store_job_insert(s, &run, now - 60000, &err), &err, "insert job");
    bad |= check(mt_store_job_transition(s, run.job_id, "QUEUED", "SCHEDULED",
                                         "placed on 4 devices", now - 59000, &err),
                 &err, "schedule");
    bad |= check(mt_store_job_transition(s, run.job_id, "SCHEDULED", "RUNNING", "all workers ready",
                                         now - 58000, &err),
                 &err, "run");
    mt_store_placement pl[4];
    memset(pl, 0, sizeof(pl));
    for (uint32_t i = 0; i < 4; i++) {
        pl[i].device = i;
        snprintf(pl[i].worker_id, sizeof(pl[i].worker_id), "%s", i < 2 ? "worker-a" : "worker-b");
        pl[i].local_index = i % 2;
        pl[i].coords[0] = i / 2;
        pl[i].coords[1] = i % 2;
        pl[i].n_coords = 2;
    }
    bad |= check(mt_store_job_set_placement(s, run.job_id, pl, 4, &err), &err, "placement");

    size_t cap = 4096, n = 0;
    mt_store_metric *pts = calloc(cap, sizeof(*pts));
    bad |= check(mt_store_tx_begin(s, &err), &err, "begin");
    for (long st = 1; st <= steps && pts != NULL; st++) {
        for (long j = 0; j < k && j < 6; j++) {
            if ((j == 3 || j == 4) && st % 10 != 0)
                continue;
            mt_store_metric *m = &pts[n++];
            m->step = (uint64_t)st;
            m->epoch = (uint32_t)(st / 100);
            snprintf(m->name, sizeof(m->name), "%s", names[j]);
            m->value = value_of((int)j, (double)st);
            m->time_ms = now - 58000 + st * 10;
            if (n == cap) {
                bad |= check(mt_store_metrics_insert(s, run.job_id, pts, n, &err), &err, "metrics");
                n = 0;
            }
        }
    }
    if (n > 0)
        bad |= check(mt_store_metrics_insert(s, run.job_id, pts, n, &err), &err, "metrics");
    bad |= check(mt_store_tx_commit(s, &err), &err, "commit");
    free(pts);
    bad |= check(mt_store_job_set_step(s, run.job_id, (uint64_t)steps, now, &err), &err, "step");
    if (restart > 0) { /* the reasons coordinator/jobs.c writes (core/watch reads them) */
        char why[160];
        snprintf(why, sizeof(why),
                 "placed on 2 workers (attempt 2, resuming from a checkpoint at step %ld)",
                 restart);
        bad |=
            check(mt_store_job_transition(s, run.job_id, "RUNNING", "RESTARTING",
                                          "worker worker-b lost (no heartbeat)", now - 3000, &err),
                  &err, "restart");
        bad |= check(mt_store_job_transition(s, run.job_id, "RESTARTING", "SCHEDULED", why,
                                             now - 2000, &err),
                     &err, "schedule again");
        bad |= check(mt_store_job_transition(s, run.job_id, "SCHEDULED", "RUNNING",
                                             "all 2 tasks started (attempt 2)", now - 1000, &err),
                     &err, "run again");
    }
    mt_store_checkpoint c = {0};
    c.step = (uint64_t)steps / 2;
    snprintf(c.location, sizeof(c.location), "ckpt/%s/step-%ld.mtc", run.job_id, steps / 2);
    snprintf(c.checksum, sizeof(c.checksum), "crc32:1234abcd");
    c.size_bytes = 123456;
    bad |= check(mt_store_checkpoint_insert(s, run.job_id, &c, &err), &err, "checkpoint");
    bad |= check(mt_store_checkpoint_complete(s, run.job_id, c.step, c.size_bytes, NULL, now, &err),
                 &err, "checkpoint complete");

    snprintf(failed.name, sizeof(failed.name), "bad-\"quoted\"-job");
    failed.spec_json = SEED_SPEC("bad", "");
    bad |= check(mt_store_job_insert(s, &failed, now - 30000, &err), &err, "insert failed job");
    bad |= check(mt_store_job_transition(s, failed.job_id, NULL, "FAILED",
                                         "INVALID_ARGUMENT: layer dense_1: shape mismatch",
                                         now - 29000, &err),
                 &err, "fail job");
    snprintf(queued.name, sizeof(queued.name), "waiting");
    queued.spec_json =
        SEED_SPEC("waiting", "\"mesh\":{\"batch\":64},"); /* never fits: stays QUEUED */
    queued.total_steps = 100;
    bad |= check(mt_store_job_insert(s, &queued, now - 1000, &err), &err, "insert queued job");
    for (long i = 0; i < more && !bad; i++) {
        static const char *const ends[] = {"SUCCEEDED", "FAILED", "CANCELLED"};
        mt_store_job j = {0};
        snprintf(j.name, sizeof(j.name), "bulk-%ld", i);
        j.spec_json = SEED_SPEC("bulk", "");
        j.priority = (int32_t)(i % 3);
        j.total_steps = 1000;
        bad |= check(mt_store_job_insert(s, &j, now - 900 + i, &err), &err, "insert job");
        for (int k2 = 0; k2 < 2 && i % 3 == 0; k2++) /* SUCCEEDED only from RUNNING */
            bad |=
                check(mt_store_job_transition(s, j.job_id, NULL, k2 == 0 ? "SCHEDULED" : "RUNNING",
                                              "seeded", now - 850 + i, &err),
                      &err, "run job");
        bad |= check(
            mt_store_job_transition(s, j.job_id, NULL, ends[i % 3], "seeded", now - 800 + i, &err),
            &err, "end job");
    }
    mt_store_close(s);
    if (bad)
        return 1;
    printf("%s\n", run.job_id);
    return 0;
}
