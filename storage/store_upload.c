/* SPDX-License-Identifier: MIT */
/*
 * store_upload.c — chunked, verified, crash-safe file uploads and chunked
 * reads (mt_store_upload.h).
 *
 * DESIGN. The classic write-to-temp / fsync / rename / fsync-directory
 * sequence: rename(2) within one directory is atomic, so after a crash the
 * final name holds either the old file or the complete new one; the fsync of
 * the file before the rename makes the new content durable before it becomes
 * visible, and the fsync of the directory makes the rename itself durable.
 * The crc32 is computed while chunks arrive, so verifying costs no re-read.
 * Threading: one thread at a time per upload. Tests: tests/unit/test_store_upload.c.
 */
#include "storage/mt_store_upload.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"

struct mt_store_upload {
    char *final_path; /* owned */
    char *tmp_path;   /* owned: final_path + ".part" */
    int fd;           /* the temporary file; -1 once closed */
    uint64_t received;
    uint64_t max_bytes; /* 0 = unlimited */
    uLong crc;          /* zlib crc32 of the received bytes */
    int done;           /* 1 finished, -1 failed */
};

static mt_code errno_code(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return MT_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS:
        return MT_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EFBIG:
        return MT_RESOURCE_EXHAUSTED;
    default:
        return MT_UNAVAILABLE;
    }
}

/* Set err from errno: "<what> <path>: <strerror>". */
static mt_code fail_errno(mt_err *err, int e, const char *what, const char *path)
{
    return mt_err_set(err, errno_code(e), "%s %s: %s", what, path, strerror(e));
}

/* mkdir -p of the directory part of path. */
static mt_code make_parent_dirs(const char *path, mt_err *err)
{
    char dir[PATH_MAX];
    size_t len = strlen(path);

    if (len >= sizeof(dir))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "upload %s: path too long", path);
    memcpy(dir, path, len + 1);
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return fail_errno(err, errno, "create directory", dir);
        *p = '/';
    }
    return MT_OK;
}

mt_code mt_store_upload_open(const char *final_path, uint64_t max_bytes, mt_store_upload **out,
                             mt_err *err)
{
    mt_store_upload *u = NULL;
    size_t len;
    mt_code rc;

    if (out != NULL)
        *out = NULL;
    if (out == NULL || final_path == NULL || final_path[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "upload: %s",
                          out == NULL ? "out is NULL" : "empty path");
    rc = make_parent_dirs(final_path, err);
    if (rc != MT_OK)
        return rc;
    u = mt_calloc(1, sizeof(*u));
    len = strlen(final_path);
    if (u == NULL || (u->final_path = mt_strdup(final_path)) == NULL ||
        (u->tmp_path = mt_malloc(len + sizeof(".part"))) == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "upload %s: out of memory", final_path);
        goto fail;
    }
    memcpy(u->tmp_path, final_path, len);
    memcpy(u->tmp_path + len, ".part", sizeof(".part"));
    u->max_bytes = max_bytes;
    u->crc = crc32(0L, Z_NULL, 0);
    u->fd = open(u->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (u->fd < 0) {
        rc = fail_errno(err, errno, "create", u->tmp_path);
        goto fail;
    }
    *out = u;
    return MT_OK;
fail:
    if (u != NULL) {
        u->fd = -1;
        u->done = 1; /* nothing to remove */
    }
    mt_store_upload_close(u);
    return rc;
}

/* Write all of buf; 0 or errno. */
static int write_all(int fd, const unsigned char *buf, size_t len)
{
    while (len > 0) {
        ssize_t k = write(fd, buf, len);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        buf += k;
        len -= (size_t)k;
    }
    return 0;
}

mt_code mt_store_upload_write(mt_store_upload *u, uint64_t offset, const void *data, size_t len,
                              mt_err *err)
{
    const unsigned char *p = data;
    uint64_t skip;
    int e;

    if (u->done != 0)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "upload %s: already %s", u->final_path,
                          u->done > 0 ? "finished" : "failed");
    if (offset > u->received)
        return mt_err_set(err, MT_OUT_OF_RANGE,
                          "upload %s: chunk at offset %llu, expected %llu (a chunk is missing)",
                          u->final_path, (unsigned long long)offset,
                          (unsigned long long)u->received);
    if (len > 0 && data == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "upload %s: data is NULL", u->final_path);
    skip = u->received - offset; /* bytes of a retried chunk we already have */
    if (skip >= len)
        return MT_OK;
    p += skip;
    len -= (size_t)skip;
    if (u->max_bytes > 0 && len > u->max_bytes - u->received)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "upload %s: larger than the limit of %llu "
                          "bytes",
                          u->final_path, (unsigned long long)u->max_bytes);
    e = write_all(u->fd, p, len);
    if (e != 0) {
        u->done = -1;
        return fail_errno(err, e, "write", u->tmp_path);
    }
    /* crc32 takes uInt lengths: feed large chunks in pieces */
    for (size_t off = 0; off < len;) {
        uInt k = (uInt)(len - off > 0x40000000u ? 0x40000000u : len - off);
        u->crc = crc32(u->crc, p + off, k);
        off += k;
    }
    u->received += len;
    return MT_OK;
}

uint64_t mt_store_upload_received(const mt_store_upload *u)
{
    return u->received;
}

void mt_store_upload_checksum(const mt_store_upload *u, char *buf, size_t cap)
{
    snprintf(buf, cap, "crc32:%08lx", (unsigned long)u->crc);
}

/* fsync the directory holding path (makes a rename in it durable). */
static int fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t len = slash == NULL ? 0 : (size_t)(slash - path);
    int fd, e = 0;

    if (slash == NULL)
        memcpy(dir, ".", 2);
    else if (len == 0)
        memcpy(dir, "/", 2);
    else if (len < sizeof(dir)) {
        memcpy(dir, path, len);
        dir[len] = '\0';
    } else
        return ENAMETOOLONG;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    if (fsync(fd) != 0)
        e = errno;
    close(fd);
    return e;
}

static mt_code publish(mt_store_upload *u, uint64_t total_size, const char *checksum, mt_err *err)
{
    char mine[32];
    int e;

    if (u->received != total_size)
        return mt_err_set(err, MT_DATA_LOSS, "upload %s: received %llu bytes, expected %llu",
                          u->final_path, (unsigned long long)u->received,
                          (unsigned long long)total_size);
    if (checksum != NULL && checksum[0] != '\0') {
        if (strncmp(checksum, "crc32:", 6) != 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "upload %s: checksum \"%.40s\" is not \"crc32:<8 hex digits>\"",
                              u->final_path, checksum);
        mt_store_upload_checksum(u, mine, sizeof(mine));
        if (strcasecmp(checksum, mine) != 0)
            return mt_err_set(err, MT_DATA_LOSS, "upload %s: checksum %s, sender said %.40s",
                              u->final_path, mine, checksum);
    }
    if (fsync(u->fd) != 0)
        return fail_errno(err, errno, "fsync", u->tmp_path);
    if (close(u->fd) != 0) {
        u->fd = -1;
        return fail_errno(err, errno, "close", u->tmp_path);
    }
    u->fd = -1;
    if (rename(u->tmp_path, u->final_path) != 0)
        return fail_errno(err, errno, "rename into", u->final_path);
    e = fsync_parent(u->final_path);
    if (e != 0) {
        /* the file is complete and in place; only the durability of the name is in doubt */
        return fail_errno(err, e, "fsync the directory of", u->final_path);
    }
    return MT_OK;
}

mt_code mt_store_upload_finish(mt_store_upload *u, uint64_t total_size, const char *checksum,
                               mt_err *err)
{
    mt_code rc;

    if (u->done != 0)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "upload %s: already %s", u->final_path,
                          u->done > 0 ? "finished" : "failed");
    rc = publish(u, total_size, checksum, err);
    u->done = rc == MT_OK ? 1 : -1;
    if (rc != MT_OK && u->fd >= 0) {
        close(u->fd);
        u->fd = -1;
    }
    if (rc != MT_OK)
        unlink(u->tmp_path); /* fails harmlessly once renamed */
    return rc;
}

void mt_store_upload_close(mt_store_upload *u)
{
    if (u == NULL)
        return;
    if (u->fd >= 0)
        close(u->fd);
    if (u->done <= 0 && u->tmp_path != NULL)
        unlink(u->tmp_path);
    mt_free(u->final_path);
    mt_free(u->tmp_path);
    mt_free(u);
}

mt_code mt_store_file_read_at(const char *path, uint64_t offset, void *buf, size_t cap, size_t *n,
                              uint64_t *total_size, mt_err *err)
{
    struct stat stt;
    size_t got = 0;
    int fd;

    if (n != NULL)
        *n = 0;
    if (path == NULL || n == NULL || (buf == NULL && cap > 0))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "read file: NULL argument");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail_errno(err, errno, "open", path);
    if (fstat(fd, &stt) != 0) {
        mt_code rc = fail_errno(err, errno, "stat", path);
        close(fd);
        return rc;
    }
    if (total_size != NULL)
        *total_size = (uint64_t)stt.st_size;
    while (got < cap && offset + got < (uint64_t)stt.st_size) {
        ssize_t k = pread(fd, (char *)buf + got, cap - got, (off_t)(offset + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            mt_code rc = fail_errno(err, errno, "read", path);
            close(fd);
            return rc;
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    *n = got;
    return MT_OK;
}

mt_code mt_store_file_verify(const char *path, uint64_t size, const char *checksum, mt_err *err)
{
    unsigned char buf[1 << 16];
    char got[24];
    struct stat stt;
    uLong crc = crc32(0L, Z_NULL, 0);
    mt_code rc = MT_OK;
    int fd;

    if (path == NULL || checksum == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "verify file: NULL argument");
    if (strncmp(checksum, "crc32:", 6) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "verify %s: checksum \"%.40s\" is not crc32",
                          path, checksum);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail_errno(err, errno, "open", path);
    if (fstat(fd, &stt) != 0) {
        rc = fail_errno(err, errno, "stat", path);
        close(fd);
        return rc;
    }
    if ((uint64_t)stt.st_size != size) {
        close(fd);
        return mt_err_set(err, MT_DATA_LOSS, "has %llu bytes, %llu recorded",
                          (unsigned long long)stt.st_size, (unsigned long long)size);
    }
    for (;;) {
        ssize_t k = read(fd, buf, sizeof(buf));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = fail_errno(err, errno, "read", path);
            break;
        }
        if (k == 0)
            break;
        crc = crc32(crc, buf, (uInt)k);
    }
    close(fd);
    if (rc != MT_OK)
        return rc;
    snprintf(got, sizeof(got), "crc32:%08lx", (unsigned long)crc);
    if (strcasecmp(got, checksum) != 0)
        return mt_err_set(err, MT_DATA_LOSS, "%s, recorded %.40s", got, checksum);
    return MT_OK;
}
