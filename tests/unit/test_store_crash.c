/* SPDX-License-Identifier: MIT */
/*
 * test_store_crash.c — durability of acknowledged writes across kill -9.
 *
 * A forked child (it opens its own connection; the parent holds none at fork
 * time) writes jobs, job events, metric batches and checkpoint records through
 * mt_store and, after each call returns OK, acknowledges it on a pipe — as the
 * coordinator replies to a client only after the call returned. The parent
 * SIGKILLs the child mid-stream, reopens the database and checks that every
 * acknowledged write is there and the file passes integrity_check. Three rounds
 * on the same file, each kill at a different point.
 */
#include "mt_test.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_store.h"
#include "store_test_util.h"

#define ROUND_BASE 1000000ull /* metric steps / checkpoint steps of round r start at r * this */

/* The child: write forever (bounded), ack each successful call on fd. Never returns. */
static void child_run(const char *path, int round, int fd)
{
    mt_store *s = NULL;
    mt_err err = MT_ERR_INIT;
    char last_job[32] = "";

    if (mt_store_open(path, &s, &err) != MT_OK) {
        dprintf(fd, "X open: %s\n", err.msg);
        _exit(2);
    }
    for (unsigned i = 0; i < 20000; i++) {
        uint64_t base = (uint64_t)round * ROUND_BASE + (uint64_t)i * 10;
        mt_code rc = MT_OK;
        mt_store_job j;
        mt_store_metric pts[10];
        mt_store_checkpoint c;

        switch (i % 4) {
        case 0:
            memset(&j, 0, sizeof(j));
            j.spec_json = (char *)"{\"crash\":true}";
            rc = mt_store_job_insert(s, &j, (int64_t)i, &err);
            if (rc == MT_OK) {
                memcpy(last_job, j.job_id, sizeof(last_job));
                dprintf(fd, "J %s\n", j.job_id);
            }
            break;
        case 1:
            memset(pts, 0, sizeof(pts));
            for (int k = 0; k < 10; k++) {
                pts[k].step = base + (uint64_t)k;
                snprintf(pts[k].name, sizeof(pts[k].name), "loss");
                pts[k].value = (double)k;
            }
            rc = mt_store_metrics_insert(s, "job-000001", pts, 10, &err);
            if (rc == MT_OK)
                dprintf(fd, "M %llu\n", (unsigned long long)base);
            break;
        case 2:
            rc = mt_store_job_transition(s, last_job, "QUEUED", "SCHEDULED", "placed", (int64_t)i,
                                         &err);
            if (rc == MT_OK)
                dprintf(fd, "E %s\n", last_job);
            break;
        default:
            memset(&c, 0, sizeof(c));
            c.step = base;
            snprintf(c.location, sizeof(c.location), "/ckpt/%llu", (unsigned long long)base);
            rc = mt_store_checkpoint_insert(s, "job-000001", &c, &err);
            if (rc == MT_OK)
                rc = mt_store_checkpoint_complete(s, "job-000001", base, 10, "crc32:0", 1, &err);
            if (rc == MT_OK)
                dprintf(fd, "C %llu\n", (unsigned long long)base);
            break;
        }
        if (rc != MT_OK) {
            dprintf(fd, "X %s\n", err.msg);
            _exit(3);
        }
    }
    mt_store_close(s);
    _exit(0);
}

/* Check one acknowledged line against the reopened store. */
static void verify_ack(mt_store *s, const char *line)
{
    mt_err err = MT_ERR_INIT;
    char id[64];
    unsigned long long step;

    if (sscanf(line, "J %63s", id) == 1) {
        mt_store_job j;
        if (mt_store_job_get(s, id, &j, &err) != MT_OK)
            fail_msg("acknowledged job %s lost: %s", id, err.msg);
        mt_store_job_fini(&j);
    } else if (sscanf(line, "E %63s", id) == 1) {
        mt_store_job j;
        mt_store_job_event *ev = NULL;
        size_t n = 0;
        assert_int_equal(mt_store_job_get(s, id, &j, &err), MT_OK);
        if (strcmp(j.state, "SCHEDULED") != 0)
            fail_msg("acknowledged transition of %s lost: state %s", id, j.state);
        mt_store_job_fini(&j);
        assert_int_equal(mt_store_job_events(s, id, &ev, &n, &err), MT_OK);
        assert_int_equal(n, 2);
        mt_store_job_events_free(ev);
    } else if (sscanf(line, "M %llu", &step) == 1) {
        mt_store_metric *pts = NULL;
        size_t n = 0;
        assert_int_equal(mt_store_metrics_query(s, "job-000001", step, NULL, 0, 10, &pts, &n, &err),
                         MT_OK);
        if (n != 10 || pts[0].step != step || pts[9].step != step + 9)
            fail_msg("acknowledged metric batch at step %llu lost (%zu points)", step, n);
        mt_store_metrics_free(pts);
    } else if (sscanf(line, "C %llu", &step) == 1) {
        mt_store_checkpoint c;
        if (mt_store_checkpoint_get(s, "job-000001", step, &c, &err) != MT_OK || !c.complete)
            fail_msg("acknowledged checkpoint at step %llu lost", step);
    } else {
        fail_msg("child reported: %s", line);
    }
}

typedef struct ack_log {
    char (*lines)[80];
    size_t n, cap;
} ack_log;

/* Read one line from in into the log; 0 at EOF. A child error line fails the test. */
static int read_ack(FILE *in, ack_log *log)
{
    char line[80];

    if (fgets(line, sizeof(line), in) == NULL)
        return 0;
    if (line[0] == 'X')
        fail_msg("child failed: %s", line);
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 256;
        log->lines = realloc(log->lines, log->cap * sizeof(*log->lines));
        assert_non_null(log->lines);
    }
    memcpy(log->lines[log->n++], line, sizeof(line));
    return 1;
}

static void test_store_crash_acknowledged_writes_survive_kill9(void **state)
{
    static const size_t kill_after[] = {150, 301, 77};
    store_fixture f;
    ack_log log = {NULL, 0, 0};
    (void)state;

    assert_int_equal(store_fixture_init(&f), 0);
    for (int round = 0; round < 3; round++) {
        size_t before = log.n;
        mt_store *s = NULL;
        mt_err err = MT_ERR_INIT;
        int fds[2], status;
        FILE *in;
        pid_t pid;

        assert_int_equal(pipe(fds), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child_run(f.path, round, fds[1]);
        }
        close(fds[1]);
        in = fdopen(fds[0], "r");
        assert_non_null(in);
        /* let it write, then kill it in the middle of its stream of calls */
        while (log.n - before < kill_after[round] && read_ack(in, &log))
            ;
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        while (read_ack(in, &log)) /* acks sent before it died */
            ;
        fclose(in);
        assert_true(log.n - before >= kill_after[round]);

        assert_int_equal(mt_store_open(f.path, &s, &err), MT_OK);
        for (size_t i = 0; i < log.n; i++)
            verify_ack(s, log.lines[i]);
        mt_store_close(s);
        assert_int_equal(store_raw_int(f.path, "SELECT integrity_check = 'ok' FROM "
                                               "pragma_integrity_check"),
                         1);
    }
    free(log.lines);
    store_fixture_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_crash_acknowledged_writes_survive_kill9),
    };
    return cmocka_run_group_tests_name("store_crash", tests, NULL, NULL);
}
