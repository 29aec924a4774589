/* SPDX-License-Identifier: MIT */
/*
 * test_taskdir.c — worker/taskdir.c: a task attempt's private directory and the sweep of
 * directories that dead workers left behind (a dead owner found by its released lock or,
 * for directories without a lock, by its PID; live owners, symlinks, foreign names and
 * directories with subdirectories are kept).
 */
#include "mt_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/taskdir.h"

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void touch(const char *dir, const char *name)
{
    char p[700];
    int k = snprintf(p, sizeof(p), "%s/%s", dir, name);
    assert_true(k > 0 && (size_t)k < sizeof(p));
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}

/* A PID that is not running: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static void rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_taskdir_create_is_private_and_locked(void **state)
{
    char parent[] = "/tmp/mt_taskdir_test.XXXXXX", lock[700];
    worker_taskdir d;
    struct stat st;
    mt_err err = {0};
    (void)state;
    assert_non_null(mkdtemp(parent));
    assert_int_equal(worker_taskdir_create(&d, parent, "job-000042", 3, &err), MT_OK);
    char want[600];
    snprintf(want, sizeof(want), "%s/meshtrain-worker-%d-job-000042-3-", parent, (int)getpid());
    assert_int_equal(strncmp(d.path, want, strlen(want)), 0);
    assert_int_equal(stat(d.path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(lock, sizeof(lock), "%s/.lock", d.path);
    int fd = open(lock, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), -1); /* held by d.lock_fd */
    assert_int_equal(errno, EWOULDBLOCK);
    assert_int_equal(worker_taskdir_sweep(parent), 0); /* its owner (this process) is alive */
    assert_true(exists(d.path));
    touch(d.path, "ckpt-00000010.mtc");
    worker_taskdir_remove(&d);
    assert_false(exists(lock));
    assert_int_equal(d.path[0], '\0');
    assert_int_equal(d.lock_fd, -1);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0); /* released */
    close(fd);
    rm_tree(parent);
}

static void test_taskdir_create_fails_clearly(void **state)
{
    worker_taskdir d;
    mt_err err = {0};
    (void)state;
    assert_int_equal(worker_taskdir_create(&d, "/nonexistent/mt_taskdir", "j", 1, &err),
                     MT_INTERNAL);
    assert_non_null(strstr(err.msg, "/nonexistent/mt_taskdir/meshtrain-worker-"));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(d.path[0], '\0');
    assert_int_equal(d.lock_fd, -1);
    worker_taskdir_remove(&d); /* a no-op */
}

static void test_taskdir_sweep_removes_only_dead_owners(void **state)
{
    char parent[] = "/tmp/mt_taskdir_test.XXXXXX", p[800], target[700];
    worker_taskdir live;
    mt_err err = {0};
    (void)state;
    assert_non_null(mkdtemp(parent));

    /* a live attempt of this process */
    assert_int_equal(worker_taskdir_create(&live, parent, "live", 1, &err), MT_OK);
    touch(live.path, "ckpt-00000005.mtc");

    /* an attempt of a worker killed before it could clean up: lock released with it */
    char killed[600] = "";
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        worker_taskdir d;
        if (worker_taskdir_create(&d, parent, "killed", 2, NULL) != MT_OK)
            _exit(1);
        touch(d.path, "ckpt-00000050.mtc");
        touch(d.path, "ckpt-00000060.mtc.part");
        if (write(pfd[1], d.path, strlen(d.path) + 1) < 0)
            _exit(1);
        _exit(0); /* like kill -9: no cleanup */
    }
    close(pfd[1]);
    assert_true(read(pfd[0], killed, sizeof(killed)) > 0);
    close(pfd[0]);
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_true(exists(killed));

    /* made before locks existed: the PID in the name decides */
    pid_t gone = dead_pid();
    char legacy_dead[600], legacy_live[600], unlocked_live[600], nested[600], other[600];
    snprintf(legacy_dead, sizeof(legacy_dead), "%s/meshtrain-worker-%d-job-1-1", parent, (int)gone);
    snprintf(legacy_live, sizeof(legacy_live), "%s/meshtrain-worker-%d-job-2-1", parent,
             (int)getpid());
    assert_int_equal(mkdir(legacy_dead, 0700), 0);
    touch(legacy_dead, "resume.mtc");
    assert_int_equal(mkdir(legacy_live, 0700), 0);
    /* a lock file nobody holds yet, but its creator is alive (between create and flock) */
    snprintf(unlocked_live, sizeof(unlocked_live), "%s/meshtrain-worker-%d-job-3-1-abc", parent,
             (int)getpid());
    assert_int_equal(mkdir(unlocked_live, 0700), 0);
    touch(unlocked_live, ".lock");
    /* dead, but holds a subdirectory: nothing of ours, so it stays */
    snprintf(nested, sizeof(nested), "%s/meshtrain-worker-%d-job-4-1", parent, (int)gone);
    assert_int_equal(mkdir(nested, 0700), 0);
    snprintf(p, sizeof(p), "%s/sub", nested);
    assert_int_equal(mkdir(p, 0700), 0);
    /* a symlink with a task directory's name is never followed */
    snprintf(target, sizeof(target) - 100, "%s/elsewhere", parent);
    assert_int_equal(mkdir(target, 0700), 0);
    touch(target, "precious");
    snprintf(p, sizeof(p), "%s/meshtrain-worker-%d-job-5-1", parent, (int)gone);
    assert_int_equal(symlink(target, p), 0);
    /* another program's directory */
    snprintf(other, sizeof(other), "%s/other-%d", parent, (int)gone);
    assert_int_equal(mkdir(other, 0700), 0);

    assert_int_equal(worker_taskdir_sweep(parent), 2);
    assert_false(exists(killed));
    assert_false(exists(legacy_dead));
    assert_true(exists(live.path));
    assert_true(exists(legacy_live));
    assert_true(exists(unlocked_live));
    assert_true(exists(nested));
    assert_true(exists(p));
    snprintf(p, sizeof(p), "%s/precious", target);
    assert_true(exists(p));
    assert_true(exists(other));
    assert_int_equal(worker_taskdir_sweep(parent), 0); /* nothing more to do */

    worker_taskdir_remove(&live);
    assert_int_equal(worker_taskdir_sweep("/nonexistent/mt_taskdir"), 0);
    rm_tree(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_taskdir_create_is_private_and_locked),
        cmocka_unit_test(test_taskdir_create_fails_clearly),
        cmocka_unit_test(test_taskdir_sweep_removes_only_dead_owners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
