/* SPDX-License-Identifier: MIT */
/* taskdir.c — see taskdir.h. */
#include "worker/taskdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/mt_log.h"

#define TASKDIR_PREFIX "meshtrain-worker-"
#define TASKDIR_LOCK   ".lock"

mt_code worker_taskdir_create(worker_taskdir *d, const char *parent, const char *job,
                              unsigned attempt, mt_err *err)
{
    char lock[600];
    d->lock_fd = -1;
    snprintf(d->path, sizeof(d->path), "%s/" TASKDIR_PREFIX "%d-%s-%u-XXXXXX",
             parent != NULL ? parent : "/tmp", (int)getpid(), job, attempt);
    if (mkdtemp(d->path) == NULL) {
        mt_code rc =
            mt_err_set(err, MT_INTERNAL, "task directory %s: %s", d->path, strerror(errno));
        d->path[0] = '\0';
        return rc;
    }
    snprintf(lock, sizeof(lock), "%s/" TASKDIR_LOCK, d->path);
    d->lock_fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        mt_code rc =
            mt_err_set(err, MT_INTERNAL, "task directory lock %s: %s", lock, strerror(errno));
        worker_taskdir_remove(d);
        return rc;
    }
    return MT_OK;
}

/* Unlink every non-directory entry of the open directory dfd; 0 when none is left but ".lock". */
static int empty_dir(int dfd)
{
    int left = 0, dup_fd = dup(dfd);
    DIR *dir = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (dir == NULL) {
        if (dup_fd >= 0)
            close(dup_fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strcmp(e->d_name, TASKDIR_LOCK) == 0)
            continue;
        if (unlinkat(dfd, e->d_name, 0) != 0)
            left = 1; /* a subdirectory (EISDIR) or no permission: the directory stays */
    }
    closedir(dir);
    return left ? -1 : 0;
}

/* Remove the directory open as dfd at parent_fd/name (files first, the lock file last). */
static int remove_at(int parent_fd, const char *name, int dfd)
{
    if (empty_dir(dfd) != 0)
        return -1;
    unlinkat(dfd, TASKDIR_LOCK, 0);
    return unlinkat(parent_fd, name, AT_REMOVEDIR);
}

void worker_taskdir_remove(worker_taskdir *d)
{
    if (d->path[0] != '\0') {
        char parent[512], *slash;
        snprintf(parent, sizeof(parent), "%s", d->path);
        slash = strrchr(parent, '/');
        if (slash != NULL) {
            *slash = '\0';
            int pfd = open(parent[0] != '\0' ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            int dfd = pfd >= 0
                          ? openat(pfd, slash + 1, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                          : -1;
            if (dfd >= 0 && remove_at(pfd, slash + 1, dfd) != 0)
                mt_log_warn("worker: task directory %s not removed: %s", d->path, strerror(errno));
            if (dfd >= 0)
                close(dfd);
            if (pfd >= 0)
                close(pfd);
        }
        d->path[0] = '\0';
    }
    if (d->lock_fd >= 0)
        close(d->lock_fd); /* releases the flock */
    d->lock_fd = -1;
}

/* The PID in "meshtrain-worker-PID-...", or -1. */
static long name_pid(const char *name)
{
    char *end;
    const char *s = name + strlen(TASKDIR_PREFIX);
    long pid = strtol(s, &end, 10);
    return end != s && *end == '-' && pid > 0 ? pid : -1;
}

/* 1 when the directory open as dfd belongs to no live worker (taskdir.h, Liveness). */
static int owner_gone(int dfd, long pid, int *lock_fd)
{
    int alive = pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
    *lock_fd = openat(dfd, TASKDIR_LOCK, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (alive)
        return 0; /* also a creator that has not locked yet */
    if (*lock_fd < 0)
        return errno == ENOENT; /* made before locks: the PID decides */
    return flock(*lock_fd, LOCK_EX | LOCK_NB) == 0;
}

int worker_taskdir_sweep(const char *parent)
{
    const char *dirpath = parent != NULL ? parent : "/tmp";
    int pfd = open(dirpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC), removed = 0, dup_fd;
    DIR *dir = pfd >= 0 && (dup_fd = dup(pfd)) >= 0 ? fdopendir(dup_fd) : NULL;
    if (dir == NULL) {
        if (pfd >= 0)
            close(pfd);
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        struct stat st;
        if (strncmp(e->d_name, TASKDIR_PREFIX, strlen(TASKDIR_PREFIX)) != 0 ||
            fstatat(pfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        int dfd = openat(pfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            continue;
        int lock_fd = -1;
        if (owner_gone(dfd, name_pid(e->d_name), &lock_fd) && remove_at(pfd, e->d_name, dfd) == 0)
            removed++;
        if (lock_fd >= 0)
            close(lock_fd);
        close(dfd);
    }
    closedir(dir);
    close(pfd);
    return removed;
}
