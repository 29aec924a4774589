/* SPDX-License-Identifier: MIT */
/*
 * mt_ckpt.c — checkpoint writer, verifying reader, slice reads, retention and
 * safetensors export (contract and format summary in mt_ckpt.h, byte layout in
 * docs/checkpoints.md).
 *
 * DESIGN: the header comes first so that a truncated file can still name the
 * tensor whose data is missing. The writer does not know the header's size
 * until the last tensor is added, so tensor data first goes to an anonymous
 * temporary file (created next to the target and unlinked at once, so a crash
 * leaves nothing behind); commit then writes preamble + header + data to
 * "<path>.tmp.XXXXXX", fsyncs, renames and fsyncs the directory. The data is
 * copied once more, from the page cache; a checkpoint is written far less often
 * than it is read, and this keeps the format simple and strictly checkable.
 * The layout is canonical (tensor i starts at the first 64-byte boundary after
 * tensor i-1, padding is zero, nothing follows the last tensor), so the reader
 * can verify every byte of the file: a flipped bit anywhere is reported.
 * Threading: see the header. Tests: tests/unit/test_ckpt.c.
 */
#include "ckpt/mt_ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mt_ckpt stores tensor data in host order and assumes a little-endian host"
#endif

#define PREAMBLE_LEN 24
#define HEADER_MAX   (1u << 30)
#define VERSION      2u /* 2: a Merkle digest per tensor entry; 1 is still read */
#define COPY_CHUNK   (1u << 20)
#define MAX_ELEMS    ((uint64_t)1 << 60)
#define SPAN_MAX     ((uint64_t)64 << 20) /* largest span read at once by read_slice */

static const uint8_t magic[8] = {'M', 'T', 'C', 'K', 'P', 'T', '1', '\n'};

typedef struct ck_tensor {
    char *name;
    mt_ckpt_dtype dtype;
    int rank;
    int64_t shape[MT_CKPT_MAX_RANK];
    uint64_t offset; /* from the start of the data region, multiple of MT_CKPT_ALIGN */
    uint64_t nbytes;
    uint32_t crc;
    int has_digest;   /* version 2 files */
    mt_digest digest; /* core/digest tensor digest of the data */
} ck_tensor;

size_t mt_ckpt_dtype_size(mt_ckpt_dtype dtype)
{
    switch (dtype) {
    case MT_CKPT_F32:
    case MT_CKPT_I32:
        return 4;
    case MT_CKPT_F64:
    case MT_CKPT_I64:
        return 8;
    case MT_CKPT_U8:
        return 1;
    }
    return 0;
}

const char *mt_ckpt_dtype_name(mt_ckpt_dtype dtype)
{
    switch (dtype) {
    case MT_CKPT_F32:
        return "F32";
    case MT_CKPT_F64:
        return "F64";
    case MT_CKPT_I32:
        return "I32";
    case MT_CKPT_I64:
        return "I64";
    case MT_CKPT_U8:
        return "U8";
    }
    return "?";
}

static uint64_t align_up(uint64_t v)
{
    return (v + MT_CKPT_ALIGN - 1) & ~(uint64_t)(MT_CKPT_ALIGN - 1);
}

static uint32_t crc_update(uint32_t crc, const void *p, uint64_t n)
{
    const uint8_t *b = p;

    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}

/* ------------------------------------------------------------------ little-endian codec */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

/* Reads n (1..8) bytes little-endian into *v; 0 when the header ends first. */
static int cur_get(cursor *c, int n, uint64_t *v)
{
    if (c->left < (size_t)n)
        return 0;
    *v = get_le(c->p, n);
    c->p += n;
    c->left -= (size_t)n;
    return 1;
}

/* ------------------------------------------------------------------ shapes and slices */

/* Byte size of a tensor, with every check a header or a caller needs. */
static int tensor_nbytes(mt_ckpt_dtype dtype, const int64_t *shape, int rank, uint64_t *nbytes)
{
    uint64_t elems = 1;
    size_t es = mt_ckpt_dtype_size(dtype);

    if (es == 0 || rank < 0 || rank > MT_CKPT_MAX_RANK)
        return 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > MAX_ELEMS)
            return 0;
        if (shape[i] != 0 && elems > MAX_ELEMS / (uint64_t)shape[i])
            return 0;
        elems *= (uint64_t)shape[i];
    }
    *nbytes = elems * es;
    return 1;
}

/* Called per contiguous run: element offsets in the global and local tensors, length. */
typedef int (*run_fn)(void *ctx, uint64_t gofs, uint64_t lofs, uint64_t len);

/*
 * Enumerate the slice [off, off+loc) of a row-major tensor of `shape` as maximal
 * contiguous runs, in local row-major order. Trailing axes the slice covers fully
 * merge into one run. Stops at the first nonzero return of fn and returns it.
 */
static int for_each_run(const int64_t *shape, int rank, const int64_t *off, const int64_t *loc,
                        run_fn fn, void *ctx)
{
    uint64_t gstride[MT_CKPT_MAX_RANK], inner = 1, run, lofs = 0;
    int64_t idx[MT_CKPT_MAX_RANK] = {0};
    int c;

    if (rank == 0)
        return fn(ctx, 0, 0, 1);
    for (int i = 0; i < rank; i++)
        if (loc[i] == 0)
            return 0;
    for (int i = rank - 1; i >= 0; i--) {
        gstride[i] = inner;
        inner *= (uint64_t)shape[i];
    }
    c = rank - 1;
    while (c > 0 && loc[c] == shape[c])
        c--;
    run = (uint64_t)loc[c] * gstride[c];
    for (;;) {
        uint64_t g = (uint64_t)off[c] * gstride[c];
        int i, rc;
        for (i = 0; i < c; i++)
            g += (uint64_t)(off[i] + idx[i]) * gstride[i];
        rc = fn(ctx, g, lofs, run);
        if (rc != 0)
            return rc;
        lofs += run;
        for (i = c - 1; i >= 0; i--) {
            if (++idx[i] < loc[i])
                break;
            idx[i] = 0;
        }
        if (i < 0)
            return 0;
    }
}

/* OUT_OF_RANGE unless [off, off+loc) lies inside shape on every axis. */
static mt_code check_slice(const char *label, const ck_tensor *t, const int64_t *off,
                           const int64_t *loc, mt_err *err)
{
    for (int i = 0; i < t->rank; i++)
        if (off[i] < 0 || loc[i] < 0 || off[i] > t->shape[i] || loc[i] > t->shape[i] - off[i])
            return mt_err_set(err, MT_OUT_OF_RANGE,
                              "%s: tensor '%s': slice [%lld, %lld) on axis %d is outside its "
                              "size %lld",
                              label, t->name, (long long)off[i], (long long)off[i] + loc[i], i,
                              (long long)t->shape[i]);
    return MT_OK;
}

/* ------------------------------------------------------------------ I/O helpers */

static mt_code io_err(mt_err *err, int e, const char *what, const char *path)
{
    mt_code code;

    switch (e) {
    case ENOENT:
    case ENOTDIR:
        code = MT_NOT_FOUND;
        break;
    case EACCES:
    case EPERM:
    case EROFS:
        code = MT_PERMISSION_DENIED;
        break;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
        code = MT_RESOURCE_EXHAUSTED;
        break;
    default:
        code = MT_INTERNAL;
    }
    return mt_err_set(err, code, "%s %s: %s", what, path, strerror(e));
}

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;

    while (n > 0) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Bytes read (short only at end of file) or -1 with errno. */
static ssize_t pread_all(int fd, void *p, size_t n, uint64_t off)
{
    uint8_t *b = p;
    size_t got = 0;

    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* fsync the directory holding path, so a rename in it is durable. */
static mt_code fsync_dir(const char *path, mt_err *err)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    int fd;

    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return io_err(err, errno, "open directory", dir);
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return io_err(err, e, "fsync directory", dir);
    }
    close(fd);
    return MT_OK;
}

/* A file written under a temporary name and renamed into place on commit. */
typedef struct atomic_file {
    int fd;
    uint64_t len;
    char *tmp;
    const char *path;
} atomic_file;

static mt_code af_open(atomic_file *af, const char *path, mt_err *err)
{
    size_t n = strlen(path) + 16;

    af->fd = -1;
    af->len = 0;
    af->path = path;
    af->tmp = mt_malloc(n);
    if (af->tmp == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    snprintf(af->tmp, n, "%s.tmp.XXXXXX", path);
    af->fd = mkostemp(af->tmp, O_CLOEXEC);
    if (af->fd < 0) {
        mt_code rc = io_err(err, errno, "create", af->tmp);
        mt_free(af->tmp);
        af->tmp = NULL;
        return rc;
    }
    (void)fchmod(af->fd, 0644); /* on failure mkstemp's 0600 stays: correct, less convenient */
    return MT_OK;
}

static mt_code af_write(atomic_file *af, const void *p, size_t n, mt_err *err)
{
    if (pwrite_all(af->fd, p, n, af->len) != 0)
        return io_err(err, errno, "write", af->tmp);
    af->len += n;
    return MT_OK;
}

static void af_abort(atomic_file *af)
{
    if (af->fd >= 0)
        close(af->fd);
    if (af->tmp != NULL) {
        unlink(af->tmp);
        mt_free(af->tmp);
    }
    af->fd = -1;
    af->tmp = NULL;
}

static mt_code af_commit(atomic_file *af, mt_err *err)
{
    mt_code rc;

    if (fsync(af->fd) != 0) {
        rc = io_err(err, errno, "fsync", af->tmp);
        af_abort(af);
        return rc;
    }
    if (close(af->fd) != 0) {
        af->fd = -1;
        rc = io_err(err, errno, "close", af->tmp);
        af_abort(af);
        return rc;
    }
    af->fd = -1;
    if (rename(af->tmp, af->path) != 0) {
        rc = io_err(err, errno, "rename to", af->path);
        af_abort(af);
        return rc;
    }
    mt_free(af->tmp);
    af->tmp = NULL;
    return fsync_dir(af->path, err);
}

/* ------------------------------------------------------------------ writer */

struct mt_ckpt_writer {
    char *path;
    int data_fd;       /* anonymous temporary file holding the data region */
    uint64_t data_len; /* end of the last tensor in data_fd */
    ck_tensor *t;
    int n, cap;
    uint64_t step, epoch, input_pos;
    char *spec;
    /* the tensor being assembled by _begin/_put_slice/_end */
    int building;
    ck_tensor cur;
    uint8_t *cur_buf;
    uint8_t *cur_seen; /* one bit per element */
    uint64_t cur_elems, cur_seen_count;
};

mt_code mt_ckpt_writer_open(const char *path, mt_ckpt_writer **out, mt_err *err)
{
    mt_ckpt_writer *w;
    char *tmpl;
    size_t n;

    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint: empty path");
    w = mt_calloc(1, sizeof(*w));
    if (w == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", path);
    w->data_fd = -1;
    w->path = mt_strdup(path);
    n = strlen(path) + 16;
    tmpl = mt_malloc(n);
    if (w->path == NULL || tmpl == NULL) {
        mt_free(tmpl);
        mt_ckpt_writer_abort(w);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", path);
    }
    snprintf(tmpl, n, "%s.data.XXXXXX", path);
    w->data_fd = mkostemp(tmpl, O_CLOEXEC);
    if (w->data_fd < 0) {
        mt_code rc = io_err(err, errno, "checkpoint: create temporary file", tmpl);
        mt_free(tmpl);
        mt_ckpt_writer_abort(w);
        return rc;
    }
    unlink(tmpl); /* anonymous from now on: a crash leaves nothing behind */
    mt_free(tmpl);
    *out = w;
    return MT_OK;
}

void mt_ckpt_writer_set_position(mt_ckpt_writer *w, uint64_t step, uint64_t epoch,
                                 uint64_t input_position)
{
    w->step = step;
    w->epoch = epoch;
    w->input_pos = input_position;
}

mt_code mt_ckpt_writer_set_spec(mt_ckpt_writer *w, const char *spec_json, mt_err *err)
{
    char *s = NULL;

    if (spec_json != NULL) {
        s = mt_strdup(spec_json);
        if (s == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", w->path);
    }
    mt_free(w->spec);
    w->spec = s;
    return MT_OK;
}

static void drop_current(mt_ckpt_writer *w)
{
    mt_free(w->cur.name);
    mt_free(w->cur_buf);
    mt_free(w->cur_seen);
    memset(&w->cur, 0, sizeof(w->cur));
    w->cur_buf = NULL;
    w->cur_seen = NULL;
    w->building = 0;
}

void mt_ckpt_writer_abort(mt_ckpt_writer *w)
{
    if (w == NULL)
        return;
    drop_current(w);
    if (w->data_fd >= 0)
        close(w->data_fd);
    for (int i = 0; i < w->n; i++)
        mt_free(w->t[i].name);
    mt_free(w->t);
    mt_free(w->spec);
    mt_free(w->path);
    mt_free(w);
}

/* Validates a new tensor's metadata and fills *t (name copied). */
static mt_code declare(mt_ckpt_writer *w, const char *name, mt_ckpt_dtype dtype,
                       const int64_t *shape, int rank, ck_tensor *t, mt_err *err)
{
    size_t len = name != NULL ? strlen(name) : 0;

    if (w->building)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "checkpoint %s: tensor '%s' is begun but not ended", w->path,
                          w->cur.name);
    if (len == 0 || len > MT_CKPT_MAX_NAME)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "checkpoint %s: tensor name must have 1..%d bytes", w->path,
                          MT_CKPT_MAX_NAME);
    if (strcmp(name, "__metadata__") == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "checkpoint %s: '__metadata__' is reserved (safetensors)", w->path);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return mt_err_set(err, MT_ALREADY_EXISTS, "checkpoint %s: tensor '%s' added twice",
                              w->path, name);
    memset(t, 0, sizeof(*t));
    if (mt_ckpt_dtype_size(dtype) == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint %s: tensor '%s': unknown dtype %d",
                          w->path, name, (int)dtype);
    if (rank < 0 || rank > MT_CKPT_MAX_RANK || (rank > 0 && shape == NULL))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "checkpoint %s: tensor '%s': rank %d outside 0..%d", w->path, name, rank,
                          MT_CKPT_MAX_RANK);
    if (!tensor_nbytes(dtype, shape, rank, &t->nbytes))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "checkpoint %s: tensor '%s': negative or too large dimension", w->path,
                          name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        ck_tensor *nt = mt_realloc(w->t, (size_t)cap * sizeof(*nt));
        if (nt == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", w->path);
        w->t = nt;
        w->cap = cap;
    }
    t->name = mt_strdup(name);
    if (t->name == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", w->path);
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    return MT_OK;
}

/* The digest description of t (borrowing its name and shape). */
static void ck_desc(const ck_tensor *t, mt_digest_tensor_desc *d)
{
    d->name = t->name;
    d->dtype = mt_ckpt_dtype_name(t->dtype);
    d->elem_size = mt_ckpt_dtype_size(t->dtype);
    d->rank = t->rank;
    d->shape = t->shape;
}

static mt_code ck_digest_whole(const ck_tensor *t, const void *data, mt_digest *out, mt_err *err)
{
    mt_digest_tensor_desc d;
    ck_desc(t, &d);
    return mt_digest_tensor_whole(&d, data, out, err);
}

/* Appends data for declared tensor t (takes t->name) to the data file. */
static mt_code append(mt_ckpt_writer *w, ck_tensor *t, const void *data, mt_err *err)
{
    static const uint8_t zeros[MT_CKPT_ALIGN];
    uint64_t off = align_up(w->data_len);

    if (off > w->data_len && pwrite_all(w->data_fd, zeros, off - w->data_len, w->data_len) != 0)
        goto io;
    if (t->nbytes > 0 && pwrite_all(w->data_fd, data, t->nbytes, off) != 0)
        goto io;
    t->offset = off;
    t->crc = crc_update((uint32_t)crc32(0L, Z_NULL, 0), data, t->nbytes);
    if (ck_digest_whole(t, data, &t->digest, err) != MT_OK) {
        mt_free(t->name);
        t->name = NULL;
        return MT_RESOURCE_EXHAUSTED;
    }
    t->has_digest = 1;
    w->data_len = off + t->nbytes;
    w->t[w->n++] = *t;
    return MT_OK;
io:;
    mt_code rc = io_err(err, errno, "checkpoint: write data of", w->path);
    mt_free(t->name);
    t->name = NULL;
    return rc;
}

mt_code mt_ckpt_writer_add(mt_ckpt_writer *w, const char *name, mt_ckpt_dtype dtype,
                           const int64_t *shape, int rank, const void *data, mt_err *err)
{
    ck_tensor t;
    mt_code rc = declare(w, name, dtype, shape, rank, &t, err);

    if (rc != MT_OK)
        return rc;
    return append(w, &t, data, err);
}

mt_code mt_ckpt_writer_begin(mt_ckpt_writer *w, const char *name, mt_ckpt_dtype dtype,
                             const int64_t *shape, int rank, mt_err *err)
{
    ck_tensor t;
    mt_code rc = declare(w, name, dtype, shape, rank, &t, err);

    if (rc != MT_OK)
        return rc;
    w->cur = t;
    w->cur_elems = t.nbytes / mt_ckpt_dtype_size(dtype);
    w->cur_seen_count = 0;
    w->cur_buf = mt_malloc(t.nbytes);
    w->cur_seen = mt_calloc((size_t)(w->cur_elems + 7) / 8, 1);
    w->building = 1;
    if (w->cur_buf == NULL || w->cur_seen == NULL) {
        drop_current(w);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: tensor '%s': out of memory",
                          w->path, name);
    }
    return MT_OK;
}

typedef struct put_ctx {
    mt_ckpt_writer *w;
    const uint8_t *src;
    size_t es;
} put_ctx;

static int put_run(void *ctx, uint64_t gofs, uint64_t lofs, uint64_t len)
{
    put_ctx *p = ctx;
    mt_ckpt_writer *w = p->w;

    memcpy(w->cur_buf + gofs * p->es, p->src + lofs * p->es, len * p->es);
    for (uint64_t e = gofs; e < gofs + len; e++) {
        uint8_t bit = (uint8_t)(1u << (e & 7));
        if (!(w->cur_seen[e >> 3] & bit)) {
            w->cur_seen[e >> 3] |= bit;
            w->cur_seen_count++;
        }
    }
    return 0;
}

mt_code mt_ckpt_writer_put_slice(mt_ckpt_writer *w, const int64_t *offsets,
                                 const int64_t *local_shape, const void *data, mt_err *err)
{
    put_ctx p = {w, data, 0};
    mt_code rc;

    if (!w->building)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "checkpoint %s: no tensor begun", w->path);
    rc = check_slice(w->path, &w->cur, offsets, local_shape, err);
    if (rc != MT_OK)
        return rc;
    p.es = mt_ckpt_dtype_size(w->cur.dtype);
    for_each_run(w->cur.shape, w->cur.rank, offsets, local_shape, put_run, &p);
    return MT_OK;
}

mt_code mt_ckpt_writer_end(mt_ckpt_writer *w, mt_err *err)
{
    ck_tensor t;
    mt_code rc;

    if (!w->building)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "checkpoint %s: no tensor begun", w->path);
    if (w->cur_seen_count != w->cur_elems) {
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "checkpoint %s: tensor '%s': shards cover %llu of %llu elements", w->path,
                        w->cur.name, (unsigned long long)w->cur_seen_count,
                        (unsigned long long)w->cur_elems);
        drop_current(w);
        return rc;
    }
    t = w->cur;
    w->cur.name = NULL; /* append takes it */
    rc = append(w, &t, w->cur_buf, err);
    drop_current(w);
    return rc;
}

static size_t header_size(const mt_ckpt_writer *w)
{
    size_t n = 4 * 8 + 4 + 4 + (w->spec != NULL ? strlen(w->spec) : 0);

    for (int i = 0; i < w->n; i++)
        n += 2 + strlen(w->t[i].name) + 1 + 1 + 8 * (size_t)w->t[i].rank + 8 + 8 + 4 +
             MT_DIGEST_SIZE;
    return n;
}

/* Preamble and header into buf (PREAMBLE_LEN + hlen bytes). */
static void header_fill(const mt_ckpt_writer *w, uint8_t *buf, size_t hlen)
{
    uint8_t *p = buf + PREAMBLE_LEN;
    size_t slen = w->spec != NULL ? strlen(w->spec) : 0;

    put_u64(p, w->step);
    put_u64(p + 8, w->epoch);
    put_u64(p + 16, w->input_pos);
    put_u64(p + 24, w->data_len);
    put_u32(p + 32, (uint32_t)w->n);
    put_u32(p + 36, (uint32_t)slen);
    p += 40;
    memcpy(p, w->spec != NULL ? w->spec : "", slen);
    p += slen;
    for (int i = 0; i < w->n; i++) {
        const ck_tensor *t = &w->t[i];
        size_t nl = strlen(t->name);
        put_u16(p, (uint16_t)nl);
        memcpy(p + 2, t->name, nl);
        p += 2 + nl;
        p[0] = (uint8_t)t->dtype;
        p[1] = (uint8_t)t->rank;
        p += 2;
        for (int d = 0; d < t->rank; d++, p += 8)
            put_u64(p, (uint64_t)t->shape[d]);
        put_u64(p, t->offset);
        put_u64(p + 8, t->nbytes);
        put_u32(p + 16, t->crc);
        memcpy(p + 20, t->digest.b, MT_DIGEST_SIZE);
        p += 20 + MT_DIGEST_SIZE;
    }
    memcpy(buf, magic, 8);
    put_u32(buf + 8, VERSION);
    put_u32(buf + 12, (uint32_t)hlen);
    put_u32(buf + 16, crc_update((uint32_t)crc32(0L, Z_NULL, 0), buf + PREAMBLE_LEN, hlen));
    put_u32(buf + 20, crc_update((uint32_t)crc32(0L, Z_NULL, 0), buf, 20));
}

mt_code mt_ckpt_writer_commit(mt_ckpt_writer *w, mt_err *err)
{
    atomic_file af = {-1, 0, NULL, NULL};
    uint8_t *hdr = NULL, *chunk = NULL;
    size_t hlen;
    uint64_t pad;
    mt_code rc;

    if (w->building) {
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "checkpoint %s: tensor '%s' is begun but not ended", w->path, w->cur.name);
        goto out;
    }
    hlen = header_size(w);
    if (hlen > HEADER_MAX) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint %s: header of %zu bytes is too large",
                        w->path, hlen);
        goto out;
    }
    pad = align_up(PREAMBLE_LEN + hlen) - (PREAMBLE_LEN + hlen);
    hdr = mt_calloc(1, PREAMBLE_LEN + hlen + pad);
    chunk = mt_malloc(COPY_CHUNK);
    if (hdr == NULL || chunk == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", w->path);
        goto out;
    }
    header_fill(w, hdr, hlen);
    rc = af_open(&af, w->path, err);
    if (rc != MT_OK)
        goto out;
    rc = af_write(&af, hdr, PREAMBLE_LEN + hlen + pad, err);
    for (uint64_t off = 0; rc == MT_OK && off < w->data_len;) {
        size_t k = w->data_len - off > COPY_CHUNK ? COPY_CHUNK : (size_t)(w->data_len - off);
        if (pread_all(w->data_fd, chunk, k, off) != (ssize_t)k) {
            rc = io_err(err, errno ? errno : EIO, "checkpoint: read back data of", w->path);
            break;
        }
        rc = af_write(&af, chunk, k, err);
        off += k;
    }
    if (rc == MT_OK)
        rc = af_commit(&af, err);
    else
        af_abort(&af);
out:
    mt_free(hdr);
    mt_free(chunk);
    mt_ckpt_writer_abort(w);
    return rc;
}

/* ------------------------------------------------------------------ reader */

struct mt_ckpt {
    int fd;             /* -1 for a memory image */
    const uint8_t *mem; /* borrowed memory image, or NULL */
    uint64_t size;      /* file size */
    char *label;        /* "checkpoint <path>" for messages */
    uint64_t step, epoch, input_pos;
    uint64_t data_start, data_len;
    char *spec;
    ck_tensor *t;
    int n;
    unsigned version; /* 1 or 2 */
};

/* Read n bytes at absolute offset; `what` names the object for messages. */
static mt_code ck_read_at(const mt_ckpt *ck, uint64_t off, void *buf, size_t n, const char *what,
                          mt_err *err)
{
    ssize_t r;

    if (ck->mem != NULL) {
        if (off > ck->size || n > ck->size - off)
            return mt_err_set(err, MT_DATA_LOSS, "%s: %s: truncated", ck->label, what);
        memcpy(buf, ck->mem + off, n);
        return MT_OK;
    }
    r = pread_all(ck->fd, buf, n, off);
    if (r < 0)
        return mt_err_set(err, MT_INTERNAL, "%s: %s: read: %s", ck->label, what, strerror(errno));
    if ((size_t)r != n)
        return mt_err_set(err, MT_DATA_LOSS, "%s: %s: truncated (the file shrank since open)",
                          ck->label, what);
    return MT_OK;
}

void mt_ckpt_close(mt_ckpt *ck)
{
    if (ck == NULL)
        return;
    if (ck->fd >= 0)
        close(ck->fd);
    for (int i = 0; i < ck->n; i++)
        mt_free(ck->t[i].name);
    mt_free(ck->t);
    mt_free(ck->spec);
    mt_free(ck->label);
    mt_free(ck);
}

static mt_code hdr_bad(const mt_ckpt *ck, mt_err *err, const char *why)
{
    return mt_err_set(err, MT_DATA_LOSS, "%s: header: malformed: %s", ck->label, why);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* DATA_LOSS when two tensors share a name; sorts a copy of the names (O(n log n), so a
 * crafted header with millions of entries cannot make the check quadratic). */
static mt_code check_unique(const mt_ckpt *ck, mt_err *err)
{
    const char **names;
    mt_code rc = MT_OK;

    if (ck->n < 2)
        return MT_OK;
    names = mt_malloc((size_t)ck->n * sizeof(*names));
    if (names == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
    for (int i = 0; i < ck->n; i++)
        names[i] = ck->t[i].name;
    qsort(names, (size_t)ck->n, sizeof(*names), cmp_name);
    for (int i = 1; i < ck->n && rc == MT_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = mt_err_set(err, MT_DATA_LOSS, "%s: header: tensor '%s' appears twice", ck->label,
                            names[i]);
    mt_free(names);
    return rc;
}

/* Parse the verified header body into ck. */
static mt_code parse_header(mt_ckpt *ck, const uint8_t *h, size_t hlen, mt_err *err)
{
    cursor c = {h, hlen};
    uint64_t v, nt, slen, expect = 0;
    mt_code rc;

    if (!cur_get(&c, 8, &ck->step) || !cur_get(&c, 8, &ck->epoch) ||
        !cur_get(&c, 8, &ck->input_pos) || !cur_get(&c, 8, &ck->data_len) || !cur_get(&c, 4, &nt) ||
        !cur_get(&c, 4, &slen))
        return hdr_bad(ck, err, "too short");
    if (slen > c.left)
        return hdr_bad(ck, err, "job spec longer than the header");
    ck->spec = mt_malloc((size_t)slen + 1);
    if (ck->spec == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
    memcpy(ck->spec, c.p, (size_t)slen);
    ck->spec[slen] = '\0';
    c.p += slen;
    c.left -= (size_t)slen;
    if (nt > c.left / 24) /* an entry takes at least 24 bytes */
        return hdr_bad(ck, err, "tensor count larger than the header can hold");
    ck->t = mt_calloc(nt ? (size_t)nt : 1, sizeof(*ck->t));
    if (ck->t == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
    for (uint64_t i = 0; i < nt; i++) {
        ck_tensor *t = &ck->t[i];
        uint64_t nl, dt, rk, nb;
        if (!cur_get(&c, 2, &nl) || nl == 0 || nl > MT_CKPT_MAX_NAME || nl > c.left)
            return hdr_bad(ck, err, "bad tensor name length");
        if (memchr(c.p, '\0', (size_t)nl) != NULL)
            return hdr_bad(ck, err, "NUL in a tensor name");
        t->name = mt_malloc((size_t)nl + 1);
        if (t->name == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
        memcpy(t->name, c.p, (size_t)nl);
        t->name[nl] = '\0';
        c.p += nl;
        c.left -= (size_t)nl;
        ck->n++;
        if (!cur_get(&c, 1, &dt) || !cur_get(&c, 1, &rk) || rk > MT_CKPT_MAX_RANK)
            return mt_err_set(err, MT_DATA_LOSS, "%s: header: tensor '%s': bad rank", ck->label,
                              t->name);
        t->dtype = (mt_ckpt_dtype)dt;
        t->rank = (int)rk;
        for (int d = 0; d < t->rank; d++) {
            if (!cur_get(&c, 8, &v) || v > (uint64_t)INT64_MAX)
                return mt_err_set(err, MT_DATA_LOSS, "%s: header: tensor '%s': bad shape",
                                  ck->label, t->name);
            t->shape[d] = (int64_t)v;
        }
        if (!cur_get(&c, 8, &t->offset) || !cur_get(&c, 8, &t->nbytes) || !cur_get(&c, 4, &v))
            return mt_err_set(err, MT_DATA_LOSS, "%s: header: tensor '%s': entry cut short",
                              ck->label, t->name);
        t->crc = (uint32_t)v;
        if (ck->version >= 2) {
            if (c.left < MT_DIGEST_SIZE)
                return mt_err_set(err, MT_DATA_LOSS, "%s: header: tensor '%s': entry cut short",
                                  ck->label, t->name);
            memcpy(t->digest.b, c.p, MT_DIGEST_SIZE);
            c.p += MT_DIGEST_SIZE;
            c.left -= MT_DIGEST_SIZE;
            t->has_digest = 1;
        }
        if (mt_ckpt_dtype_size(t->dtype) == 0)
            return mt_err_set(err, MT_DATA_LOSS, "%s: header: tensor '%s': unknown dtype %u",
                              ck->label, t->name, (unsigned)dt);
        if (!tensor_nbytes(t->dtype, t->shape, t->rank, &nb) || nb != t->nbytes)
            return mt_err_set(err, MT_DATA_LOSS,
                              "%s: header: tensor '%s': byte length does not match its shape",
                              ck->label, t->name);
        expect = align_up(expect);
        if (t->offset != expect || t->nbytes > ck->data_len || expect > ck->data_len - t->nbytes)
            return mt_err_set(err, MT_DATA_LOSS,
                              "%s: header: tensor '%s': data offset %llu, expected %llu", ck->label,
                              t->name, (unsigned long long)t->offset, (unsigned long long)expect);
        expect = t->offset + t->nbytes;
    }
    if (c.left != 0)
        return hdr_bad(ck, err, "unexpected bytes after the last tensor entry");
    rc = check_unique(ck, err);
    if (rc != MT_OK)
        return rc;
    if (expect != ck->data_len)
        return hdr_bad(ck, err, "data length does not match the tensors");
    return MT_OK;
}

/* Check that the file holds the whole data region; name the first tensor cut short. */
static mt_code check_size(const mt_ckpt *ck, mt_err *err)
{
    uint64_t end = ck->data_start + ck->data_len;

    if (ck->size > end)
        return mt_err_set(err, MT_DATA_LOSS,
                          "%s: %llu unexpected bytes after the last tensor (file has %llu, "
                          "header describes %llu)",
                          ck->label, (unsigned long long)(ck->size - end),
                          (unsigned long long)ck->size, (unsigned long long)end);
    if (ck->size == end)
        return MT_OK;
    for (int i = 0; i < ck->n; i++) {
        uint64_t tend = ck->data_start + ck->t[i].offset + ck->t[i].nbytes;
        if (tend > ck->size ||
            (ck->t[i].nbytes == 0 && ck->data_start + ck->t[i].offset > ck->size))
            return mt_err_set(err, MT_DATA_LOSS,
                              "%s: tensor '%s': truncated: its data ends at byte %llu, the file "
                              "has %llu bytes",
                              ck->label, ck->t[i].name, (unsigned long long)tend,
                              (unsigned long long)ck->size);
    }
    return mt_err_set(err, MT_DATA_LOSS, "%s: header: truncated padding", ck->label);
}

/* Verify [off, off+n) against crc (when want_crc) or zero bytes (padding). */
static mt_code verify_range(const mt_ckpt *ck, uint64_t off, uint64_t n, int want_crc, uint32_t crc,
                            const char *what, uint8_t *chunk, mt_err *err)
{
    uint32_t got = (uint32_t)crc32(0L, Z_NULL, 0);

    if (ck->mem != NULL) {
        if (want_crc) {
            got = crc_update(got, ck->mem + off, n);
        } else {
            for (uint64_t i = 0; i < n; i++)
                if (ck->mem[off + i] != 0)
                    return mt_err_set(err, MT_DATA_LOSS, "%s: %s: padding is not zero", ck->label,
                                      what);
        }
    } else {
        for (uint64_t done = 0; done < n;) {
            size_t k = n - done > COPY_CHUNK ? COPY_CHUNK : (size_t)(n - done);
            mt_code rc = ck_read_at(ck, off + done, chunk, k, what, err);
            if (rc != MT_OK)
                return rc;
            if (want_crc) {
                got = crc_update(got, chunk, k);
            } else {
                for (size_t i = 0; i < k; i++)
                    if (chunk[i] != 0)
                        return mt_err_set(err, MT_DATA_LOSS, "%s: %s: padding is not zero",
                                          ck->label, what);
            }
            done += k;
        }
    }
    if (want_crc && got != crc)
        return mt_err_set(err, MT_DATA_LOSS,
                          "%s: tensor '%s': checksum mismatch (stored %08x, computed %08x)",
                          ck->label, what, crc, got);
    return MT_OK;
}

static mt_code verify_data(const mt_ckpt *ck, uint64_t header_end, mt_err *err)
{
    uint8_t *chunk = NULL;
    mt_code rc;
    uint64_t pos;

    if (ck->mem == NULL) {
        chunk = mt_malloc(COPY_CHUNK);
        if (chunk == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
    }
    rc = verify_range(ck, header_end, ck->data_start - header_end, 0, 0, "header", chunk, err);
    pos = ck->data_start;
    for (int i = 0; rc == MT_OK && i < ck->n; i++) {
        const ck_tensor *t = &ck->t[i];
        uint64_t start = ck->data_start + t->offset;
        char what[MT_CKPT_MAX_NAME + 32];
        snprintf(what, sizeof(what), "before tensor '%s'", t->name);
        rc = verify_range(ck, pos, start - pos, 0, 0, what, chunk, err);
        if (rc == MT_OK)
            rc = verify_range(ck, start, t->nbytes, 1, t->crc, t->name, chunk, err);
        pos = start + t->nbytes;
    }
    mt_free(chunk);
    return rc;
}

static mt_code ck_load(mt_ckpt *ck, mt_err *err)
{
    uint8_t pre[PREAMBLE_LEN];
    uint8_t *h = NULL;
    uint32_t hlen;
    mt_code rc;

    if (ck->size < PREAMBLE_LEN) {
        size_t k = (size_t)ck->size;
        rc = ck_read_at(ck, 0, pre, k, "header", err);
        if (rc != MT_OK)
            return rc;
        if (memcmp(pre, magic, k < 8 ? k : 8) != 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: not a meshtrain checkpoint (bad magic)", ck->label);
        return mt_err_set(err, MT_DATA_LOSS,
                          "%s: header: truncated: the file has %llu bytes, the preamble needs %d",
                          ck->label, (unsigned long long)ck->size, PREAMBLE_LEN);
    }
    rc = ck_read_at(ck, 0, pre, PREAMBLE_LEN, "header", err);
    if (rc != MT_OK)
        return rc;
    if (memcmp(pre, magic, 8) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a meshtrain checkpoint (bad magic)",
                          ck->label);
    if ((uint32_t)get_le(pre + 20, 4) != crc_update((uint32_t)crc32(0L, Z_NULL, 0), pre, 20))
        return mt_err_set(err, MT_DATA_LOSS, "%s: header: preamble checksum mismatch", ck->label);
    if (get_le(pre + 8, 4) != VERSION && get_le(pre + 8, 4) != 1)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "%s: format version %llu is not supported (this build reads 1..%u)",
                          ck->label, (unsigned long long)get_le(pre + 8, 4), VERSION);
    ck->version = (unsigned)get_le(pre + 8, 4);
    hlen = (uint32_t)get_le(pre + 12, 4);
    if (hlen > HEADER_MAX)
        return mt_err_set(err, MT_DATA_LOSS, "%s: header: length %u is too large", ck->label, hlen);
    if (ck->size < PREAMBLE_LEN + (uint64_t)hlen)
        return mt_err_set(err, MT_DATA_LOSS,
                          "%s: header: truncated: the file has %llu bytes, the header ends at "
                          "byte %llu",
                          ck->label, (unsigned long long)ck->size,
                          (unsigned long long)(PREAMBLE_LEN + (uint64_t)hlen));
    h = mt_malloc(hlen ? hlen : 1);
    if (h == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
    rc = ck_read_at(ck, PREAMBLE_LEN, h, hlen, "header", err);
    if (rc == MT_OK &&
        (uint32_t)get_le(pre + 16, 4) != crc_update((uint32_t)crc32(0L, Z_NULL, 0), h, hlen))
        rc = mt_err_set(err, MT_DATA_LOSS, "%s: header: checksum mismatch", ck->label);
    if (rc == MT_OK)
        rc = parse_header(ck, h, hlen, err);
    mt_free(h);
    if (rc != MT_OK)
        return rc;
    ck->data_start = align_up(PREAMBLE_LEN + (uint64_t)hlen);
    rc = check_size(ck, err);
    if (rc != MT_OK)
        return rc;
    return verify_data(ck, PREAMBLE_LEN + (uint64_t)hlen, err);
}

static mt_code ck_new(const char *label, mt_ckpt **out, mt_err *err)
{
    mt_ckpt *ck = mt_calloc(1, sizeof(*ck));
    size_t n = strlen(label) + 16;

    if (ck == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", label);
    ck->fd = -1;
    ck->label = mt_malloc(n);
    if (ck->label == NULL) {
        mt_free(ck);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint %s: out of memory", label);
    }
    snprintf(ck->label, n, "checkpoint %s", label);
    *out = ck;
    return MT_OK;
}

mt_code mt_ckpt_open(const char *path, mt_ckpt **out, mt_err *err)
{
    mt_ckpt *ck = NULL;
    struct stat st;
    mt_code rc;

    *out = NULL;
    if (path == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint: no path");
    rc = ck_new(path, &ck, err);
    if (rc != MT_OK)
        return rc;
    ck->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (ck->fd < 0) {
        rc = io_err(err, errno, "open checkpoint", path);
        goto fail;
    }
    if (fstat(ck->fd, &st) != 0) {
        rc = io_err(err, errno, "stat checkpoint", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint %s: not a regular file", path);
        goto fail;
    }
    ck->size = (uint64_t)st.st_size;
    rc = ck_load(ck, err);
    if (rc != MT_OK)
        goto fail;
    *out = ck;
    return MT_OK;
fail:
    mt_ckpt_close(ck);
    return rc;
}

mt_code mt_ckpt_open_mem(const void *data, size_t len, mt_ckpt **out, mt_err *err)
{
    static const uint8_t empty[1];
    mt_ckpt *ck = NULL;
    mt_code rc;

    *out = NULL;
    rc = ck_new("(memory)", &ck, err);
    if (rc != MT_OK)
        return rc;
    ck->mem = data != NULL ? data : empty;
    ck->size = data != NULL ? len : 0;
    rc = ck_load(ck, err);
    if (rc != MT_OK) {
        mt_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return MT_OK;
}

uint64_t mt_ckpt_step(const mt_ckpt *ck)
{
    return ck->step;
}

uint64_t mt_ckpt_epoch(const mt_ckpt *ck)
{
    return ck->epoch;
}

uint64_t mt_ckpt_input_position(const mt_ckpt *ck)
{
    return ck->input_pos;
}

const char *mt_ckpt_spec(const mt_ckpt *ck)
{
    return ck->spec;
}

int mt_ckpt_count(const mt_ckpt *ck)
{
    return ck->n;
}

static void fill_info(const ck_tensor *t, mt_ckpt_tensor_info *out)
{
    memset(out, 0, sizeof(*out));
    out->name = t->name;
    out->dtype = t->dtype;
    out->rank = t->rank;
    for (int i = 0; i < t->rank; i++)
        out->shape[i] = t->shape[i];
    out->nbytes = t->nbytes;
    out->has_digest = t->has_digest != 0;
    if (t->has_digest)
        out->digest = t->digest;
}

mt_code mt_ckpt_tensor_at(const mt_ckpt *ck, int i, mt_ckpt_tensor_info *out, mt_err *err)
{
    if (i < 0 || i >= ck->n)
        return mt_err_set(err, MT_OUT_OF_RANGE, "%s: no tensor at index %d (it has %d)", ck->label,
                          i, ck->n);
    fill_info(&ck->t[i], out);
    return MT_OK;
}

static const ck_tensor *lookup(const mt_ckpt *ck, const char *name)
{
    for (int i = 0; i < ck->n; i++)
        if (strcmp(ck->t[i].name, name) == 0)
            return &ck->t[i];
    return NULL;
}

mt_code mt_ckpt_find(const mt_ckpt *ck, const char *name, mt_ckpt_tensor_info *out, mt_err *err)
{
    const ck_tensor *t = lookup(ck, name);

    if (t == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "%s: no tensor '%s'", ck->label, name);
    fill_info(t, out);
    return MT_OK;
}

mt_code mt_ckpt_read(const mt_ckpt *ck, const char *name, void *out, size_t out_size, mt_err *err)
{
    const ck_tensor *t = lookup(ck, name);

    if (t == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "%s: no tensor '%s'", ck->label, name);
    if (out_size < t->nbytes)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: tensor '%s' has %llu bytes, the buffer only %zu", ck->label, name,
                          (unsigned long long)t->nbytes, out_size);
    return ck_read_at(ck, ck->data_start + t->offset, out, t->nbytes, name, err);
}

typedef struct read_ctx {
    const mt_ckpt *ck;
    const ck_tensor *t;
    uint8_t *dst;
    size_t es;
    mt_err *err;
    mt_code rc;
} read_ctx;

static int read_run(void *ctx, uint64_t gofs, uint64_t lofs, uint64_t len)
{
    read_ctx *r = ctx;

    r->rc = ck_read_at(r->ck, r->ck->data_start + r->t->offset + gofs * r->es,
                       r->dst + lofs * r->es, len * r->es, r->t->name, r->err);
    return r->rc != MT_OK;
}

typedef struct gather_ctx {
    const uint8_t *span; /* the bytes from the slice's first to its last element */
    uint64_t first;      /* global element offset of span[0] */
    uint8_t *dst;
    size_t es;
} gather_ctx;

static int gather_run(void *ctx, uint64_t gofs, uint64_t lofs, uint64_t len)
{
    gather_ctx *g = ctx;

    memcpy(g->dst + lofs * g->es, g->span + (gofs - g->first) * g->es, len * g->es);
    return 0;
}

mt_code mt_ckpt_read_slice(const mt_ckpt *ck, const char *name, const int64_t *offsets,
                           const int64_t *local_shape, void *out, mt_err *err)
{
    const ck_tensor *t = lookup(ck, name);
    read_ctx r = {ck, t, out, 0, err, MT_OK};
    uint64_t first = 0, last = 0, stride = 1, elems = 1;
    mt_code rc;

    if (t == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "%s: no tensor '%s'", ck->label, name);
    rc = check_slice(ck->label, t, offsets, local_shape, err);
    if (rc != MT_OK)
        return rc;
    r.es = mt_ckpt_dtype_size(t->dtype);
    for (int i = t->rank - 1; i >= 0; i--) {
        if (local_shape[i] == 0)
            return MT_OK;
        first += (uint64_t)offsets[i] * stride;
        last += (uint64_t)(offsets[i] + local_shape[i] - 1) * stride;
        elems *= (uint64_t)local_shape[i];
        stride *= (uint64_t)t->shape[i];
    }
    /* A strided slice from a file (a column block: one run per row) costs one pread per
     * run; reading the span from its first to its last element once and gathering
     * took the model-parallel restore of the tutorial MLP from 12.5 ms to 0.52 ms
     * (bench/bench_ckpt.c), so do that when the span is not too large. */
    if (ck->mem == NULL && last - first + 1 > elems && (last - first + 1) * r.es <= SPAN_MAX) {
        size_t n = (size_t)((last - first + 1) * r.es);
        gather_ctx g = {mt_malloc(n), first, out, r.es};
        if (g.span != NULL) {
            rc = ck_read_at(ck, ck->data_start + t->offset + first * r.es, (void *)g.span, n,
                            t->name, err);
            if (rc == MT_OK)
                for_each_run(t->shape, t->rank, offsets, local_shape, gather_run, &g);
            mt_free((void *)g.span);
            return rc;
        }
        /* out of memory for the span: fall back to one read per run */
    }
    for_each_run(t->shape, t->rank, offsets, local_shape, read_run, &r);
    return r.rc;
}

/* ------------------------------------------------------------------ digests */

mt_code mt_ckpt_read_elems(const mt_ckpt *ck, const char *name, uint64_t first, uint64_t count,
                           void *out, mt_err *err)
{
    const ck_tensor *t = lookup(ck, name);
    uint64_t es;

    if (t == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "%s: no tensor '%s'", ck->label, name);
    es = mt_ckpt_dtype_size(t->dtype);
    if (first > t->nbytes / es || count > t->nbytes / es - first)
        return mt_err_set(err, MT_OUT_OF_RANGE,
                          "%s: tensor '%s': elements [%llu, +%llu) outside its %llu", ck->label,
                          name, (unsigned long long)first, (unsigned long long)count,
                          (unsigned long long)(t->nbytes / es));
    return ck_read_at(ck, ck->data_start + t->offset + first * es, out, (size_t)(count * es), name,
                      err);
}

mt_code mt_ckpt_digest_fill(void *ctx, uint64_t first, uint64_t count, void *out, mt_err *err)
{
    const mt_ckpt_fill_ctx *f = ctx;
    return mt_ckpt_read_elems(f->ck, f->name, first, count, out, err);
}

mt_code mt_ckpt_compute_digest(const mt_ckpt *ck, const char *name, mt_digest *out, mt_err *err)
{
    const ck_tensor *t = lookup(ck, name);
    mt_digest_tensor_desc d;
    mt_ckpt_fill_ctx f = {ck, name};

    if (t == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "%s: no tensor '%s'", ck->label, name);
    ck_desc(t, &d);
    return mt_digest_tensor(&d, NULL, 0, mt_ckpt_digest_fill, &f, out, err);
}

/* A text metadata tensor (MT_CKPT_META_PREFIX): not part of the model state. */
static bool is_meta(const char *name)
{
    return strncmp(name, MT_CKPT_META_PREFIX, strlen(MT_CKPT_META_PREFIX)) == 0;
}

mt_code mt_ckpt_root(const mt_ckpt *ck, bool weights_only, bool recompute, mt_digest *out,
                     int *count, mt_err *err)
{
    const char **names = mt_calloc(ck->n ? (size_t)ck->n : 1, sizeof(*names));
    mt_digest *d = mt_calloc(ck->n ? (size_t)ck->n : 1, sizeof(*d));
    mt_code rc = MT_OK;
    int n = 0;

    if (names == NULL || d == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", ck->label);
    for (int i = 0; rc == MT_OK && i < ck->n; i++) {
        const ck_tensor *t = &ck->t[i];
        char a[MT_DIGEST_HEX], b[MT_DIGEST_HEX];
        if ((weights_only && strchr(t->name, '/') != NULL) || is_meta(t->name))
            continue;
        if (!recompute && !t->has_digest) {
            rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                            "%s: format version %u records no digests (recompute them)", ck->label,
                            ck->version);
            break;
        }
        names[n] = t->name;
        if (!recompute) {
            d[n++] = t->digest;
            continue;
        }
        rc = mt_ckpt_compute_digest(ck, t->name, &d[n], err);
        if (rc == MT_OK && t->has_digest && !mt_digest_equal(&d[n], &t->digest))
            rc = mt_err_set(err, MT_DATA_LOSS,
                            "%s: tensor '%s': Merkle digest of the data %.16s... differs from the "
                            "recorded %.16s...",
                            ck->label, t->name, mt_digest_hex(&d[n], a),
                            mt_digest_hex(&t->digest, b));
        n++;
    }
    if (rc == MT_OK)
        rc = mt_digest_root(names, d, n, out, err);
    if (rc == MT_OK && count != NULL)
        *count = n;
    mt_free(names);
    mt_free(d);
    return rc;
}

/* ------------------------------------------------------------------ safetensors */

/* The digest placeholder of a header: overwritten in the file once every tensor is written. */
#define ST_DIGEST_KEY "mt_digest"
static const char st_placeholder[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

/* Overwrite the placeholder of the header json (written at file offset 8) with root's hex. */
static mt_code st_patch_digest(atomic_file *af, const char *json, const mt_digest *root,
                               mt_err *err)
{
    const char *key = strstr(json, "\"" ST_DIGEST_KEY "\":\"");
    char hex[MT_DIGEST_HEX];

    if (key == NULL)
        return mt_err_set(err, MT_INTERNAL, "export %s: no digest placeholder", af->path);
    key += strlen("\"" ST_DIGEST_KEY "\":\"");
    mt_digest_hex(root, hex);
    if (pwrite_all(af->fd, hex, 2 * MT_DIGEST_SIZE, 8 + (uint64_t)(key - json)) != 0)
        return io_err(err, errno, "write", af->tmp);
    return MT_OK;
}

/*
 * Add every text metadata tensor of ck (U8 "meta/<key>") to the header's metadata object m as
 * "<key>": its bytes as a string. Codes: the read's, INVALID_ARGUMENT (not U8 text),
 * RESOURCE_EXHAUSTED.
 */
static mt_code st_add_ckpt_meta(const mt_ckpt *ck, cJSON *m, const char *path, mt_err *err)
{
    for (int i = 0; i < ck->n; i++) {
        const ck_tensor *t = &ck->t[i];
        char *text;
        mt_code rc;
        if (!is_meta(t->name))
            continue;
        if (t->dtype != MT_CKPT_U8 || t->nbytes > SIZE_MAX - 1)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "export %s: %s: metadata '%s' is not text",
                              path, ck->label, t->name);
        if ((text = mt_malloc((size_t)t->nbytes + 1)) == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
        rc = mt_ckpt_read(ck, t->name, text, (size_t)t->nbytes + 1, err);
        text[t->nbytes] = '\0';
        if (rc == MT_OK && strlen(text) != t->nbytes)
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "export %s: %s: metadata '%s' holds a NUL",
                            path, ck->label, t->name);
        if (rc == MT_OK &&
            cJSON_AddStringToObject(m, t->name + strlen(MT_CKPT_META_PREFIX), text) == NULL)
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
        mt_free(text);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

/* A new safetensors header object with "__metadata__" {producer, step, epoch, meta pairs...}. */
static cJSON *st_header_new(const mt_ckpt *ck, const char *const *meta)
{
    cJSON *root = cJSON_CreateObject(), *m;
    char num[32];
    int ok = root != NULL;

    m = ok ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
    ok = m != NULL && cJSON_AddStringToObject(m, "producer", "meshtrain") != NULL;
    snprintf(num, sizeof(num), "%llu", (unsigned long long)ck->step);
    ok = ok && cJSON_AddStringToObject(m, "step", num) != NULL;
    snprintf(num, sizeof(num), "%llu", (unsigned long long)ck->epoch);
    ok = ok && cJSON_AddStringToObject(m, "epoch", num) != NULL;
    ok = ok && cJSON_AddStringToObject(m, ST_DIGEST_KEY, st_placeholder) != NULL;
    ok = ok && cJSON_AddStringToObject(m, "mt_digest_format", MT_DIGEST_FORMAT) != NULL;
    for (int i = 0; ok && meta != NULL && meta[i] != NULL; i += 2)
        ok = cJSON_AddStringToObject(m, meta[i], meta[i + 1]) != NULL;
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Add one tensor entry {dtype, shape, data_offsets [off, off + nbytes)} to a header; 0 on OOM. */
static int st_header_add(cJSON *root, const char *name, mt_ckpt_dtype dtype, int rank,
                         const int64_t *shape, uint64_t off, uint64_t nbytes)
{
    cJSON *o = cJSON_AddObjectToObject(root, name), *a;
    int ok = o != NULL && cJSON_AddStringToObject(o, "dtype", mt_ckpt_dtype_name(dtype));

    a = ok ? cJSON_AddArrayToObject(o, "shape") : NULL;
    ok = a != NULL;
    for (int d = 0; ok && d < rank; d++) {
        cJSON *v = cJSON_CreateNumber((double)shape[d]);
        ok = v != NULL && cJSON_AddItemToArray(a, v);
    }
    a = ok ? cJSON_AddArrayToObject(o, "data_offsets") : NULL;
    ok = a != NULL;
    for (int k = 0; ok && k < 2; k++) {
        cJSON *v = cJSON_CreateNumber((double)(k == 0 ? off : off + nbytes));
        ok = v != NULL && cJSON_AddItemToArray(a, v);
    }
    return ok;
}

/* The safetensors JSON header (unpadded) in *json, a new cJSON string. *count = weights.
 * Codes: st_add_ckpt_meta's, RESOURCE_EXHAUSTED. */
static mt_code safetensors_header(const mt_ckpt *ck, const char *path, char **json, int *count,
                                  mt_err *err)
{
    cJSON *root = st_header_new(ck, NULL);
    uint64_t off = 0;
    int ok = root != NULL;
    mt_code rc;

    *json = NULL;
    *count = 0;
    if (!ok)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
    rc = st_add_ckpt_meta(ck, cJSON_GetObjectItemCaseSensitive(root, "__metadata__"), path, err);
    if (rc != MT_OK) {
        cJSON_Delete(root);
        return rc;
    }
    for (int i = 0; ok && i < ck->n; i++) {
        const ck_tensor *t = &ck->t[i];
        if (strchr(t->name, '/') != NULL)
            continue; /* optimizer slot */
        ok = st_header_add(root, t->name, t->dtype, t->rank, t->shape, off, t->nbytes);
        off += t->nbytes;
        (*count)++;
    }
    if (ok)
        *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (*json == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
    return MT_OK;
}

/* Write the u64 length and the JSON header, padded with spaces to a multiple of 8. */
static mt_code st_write_header(atomic_file *af, const char *json, mt_err *err)
{
    size_t jlen = strlen(json), padded = (jlen + 7) & ~(size_t)7;
    uint8_t lenbuf[8];
    mt_code rc;

    put_u64(lenbuf, padded);
    rc = af_write(af, lenbuf, 8, err);
    if (rc == MT_OK)
        rc = af_write(af, json, jlen, err);
    if (rc == MT_OK && padded > jlen)
        rc = af_write(af, "        ", padded - jlen, err);
    return rc;
}

mt_code mt_ckpt_export_safetensors(const mt_ckpt *ck, const char *path, mt_err *err)
{
    atomic_file af = {-1, 0, NULL, NULL};
    mt_digest root;
    uint8_t *chunk = NULL;
    char *json;
    int count;
    mt_code rc;

    rc = safetensors_header(ck, path, &json, &count, err);
    if (rc != MT_OK)
        return rc;
    if (count == 0) {
        cJSON_free(json);
        return mt_err_set(err, MT_FAILED_PRECONDITION, "export %s: %s holds no weights", path,
                          ck->label);
    }
    chunk = mt_malloc(COPY_CHUNK);
    if (chunk == NULL) {
        cJSON_free(json);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
    }
    rc = mt_ckpt_root(ck, true, ck->version < 2, &root, NULL, err);
    if (rc == MT_OK)
        rc = af_open(&af, path, err);
    if (rc == MT_OK)
        rc = st_write_header(&af, json, err);
    if (rc == MT_OK)
        rc = st_patch_digest(&af, json, &root, err);
    for (int i = 0; rc == MT_OK && i < ck->n; i++) {
        const ck_tensor *t = &ck->t[i];
        if (strchr(t->name, '/') != NULL)
            continue;
        for (uint64_t done = 0; rc == MT_OK && done < t->nbytes;) {
            size_t k = t->nbytes - done > COPY_CHUNK ? COPY_CHUNK : (size_t)(t->nbytes - done);
            rc = ck_read_at(ck, ck->data_start + t->offset + done, chunk, k, t->name, err);
            if (rc == MT_OK)
                rc = af_write(&af, chunk, k, err);
            done += k;
        }
    }
    if (rc == MT_OK)
        rc = af_commit(&af, err);
    else if (af.tmp != NULL)
        af_abort(&af);
    cJSON_free(json);
    mt_free(chunk);
    return rc;
}

/* Check one plan entry against the checkpoint; *count = its elements. */
static mt_code map_check(const mt_ckpt *ck, const mt_ckpt_export_tensor *e, int i, const char *path,
                         uint64_t *count, mt_err *err)
{
    mt_ckpt_tensor_info info;
    uint64_t c = 1, v = 1;
    unsigned seen = 0;
    mt_code rc;

    if (e->name[0] == '\0' || e->rank < 0 || e->rank > MT_CKPT_MAX_RANK || e->view_rank < 0 ||
        e->view_rank > MT_CKPT_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "export %s: entry %d: bad name or rank", path,
                          i);
    for (int d = 0; d < e->rank; d++) {
        if (e->shape[d] < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "export %s: %s: negative dimension", path,
                              e->name);
        c *= (uint64_t)e->shape[d];
    }
    for (int d = 0; d < e->view_rank; d++) {
        int a = e->perm[d];
        if (e->view_shape[d] < 0 || a < 0 || a >= e->view_rank || (seen & (1u << a)) != 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "export %s: %s: view or permutation is invalid", path, e->name);
        seen |= 1u << a;
        v *= (uint64_t)e->view_shape[d];
    }
    if (e->view_rank > 0 && v != c)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "export %s: %s: view of %llu elements for %llu",
                          path, e->name, (unsigned long long)v, (unsigned long long)c);
    *count = c;
    if (e->source == NULL)
        return MT_OK;
    rc = mt_ckpt_find(ck, e->source, &info, err);
    if (rc != MT_OK)
        return rc;
    if (info.dtype != MT_CKPT_F32)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "export %s: %s: source '%s' is %s, not F32",
                          path, e->name, e->source, mt_ckpt_dtype_name(info.dtype));
    if (info.nbytes != 4 * c)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "export %s: %s: source '%s' has %llu elements, the output %llu", path,
                          e->name, e->source, (unsigned long long)(info.nbytes / 4),
                          (unsigned long long)c);
    return MT_OK;
}

/* dst[o] = view[...]: the view (view_shape, row-major) with its axes permuted by perm. */
static void map_permute(const mt_ckpt_export_tensor *e, const uint32_t *src, uint32_t *dst,
                        uint64_t count)
{
    int64_t vstride[MT_CKPT_MAX_RANK], od[MT_CKPT_MAX_RANK], os[MT_CKPT_MAX_RANK];
    int64_t idx[MT_CKPT_MAX_RANK] = {0};
    int r = e->view_rank;
    uint64_t s = 0;
    int64_t st = 1;

    for (int a = r - 1; a >= 0; a--) {
        vstride[a] = st;
        st *= e->view_shape[a];
    }
    for (int k = 0; k < r; k++) {
        od[k] = e->view_shape[e->perm[k]];
        os[k] = vstride[e->perm[k]];
    }
    for (uint64_t o = 0; o < count; o++) {
        dst[o] = src[s];
        for (int k = r - 1; k >= 0; k--) { /* odometer over the output axes */
            s += (uint64_t)os[k];
            if (++idx[k] < od[k])
                break;
            s -= (uint64_t)(os[k] * od[k]);
            idx[k] = 0;
        }
    }
}

mt_code mt_ckpt_export_safetensors_map(const mt_ckpt *ck, const mt_ckpt_export_tensor *plan, int n,
                                       const char *const *meta, const char *path, mt_err *err)
{
    atomic_file af = {-1, 0, NULL, NULL};
    uint64_t off = 0, *counts = NULL;
    uint32_t *src = NULL, *dst = NULL;
    const char **names = NULL;
    mt_digest *digests = NULL, root;
    cJSON *hdr = NULL;
    char *json = NULL;
    mt_code rc = MT_OK;

    if (n <= 0)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "export %s: no tensor to write", path);
    counts = mt_calloc((size_t)n, sizeof(*counts));
    names = mt_calloc((size_t)n, sizeof(*names));
    digests = mt_calloc((size_t)n, sizeof(*digests));
    hdr = st_header_new(ck, meta);
    if (counts == NULL || names == NULL || digests == NULL || hdr == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
        goto out;
    }
    rc = st_add_ckpt_meta(ck, cJSON_GetObjectItemCaseSensitive(hdr, "__metadata__"), path, err);
    for (int i = 0; rc == MT_OK && i < n; i++) {
        rc = map_check(ck, &plan[i], i, path, &counts[i], err);
        for (int j = 0; rc == MT_OK && j < i; j++)
            if (strcmp(plan[i].name, plan[j].name) == 0)
                rc = mt_err_set(err, MT_INVALID_ARGUMENT, "export %s: %s: duplicate name", path,
                                plan[i].name);
        if (rc == MT_OK && !st_header_add(hdr, plan[i].name, MT_CKPT_F32, plan[i].rank,
                                          plan[i].shape, off, 4 * counts[i]))
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
        off += 4 * counts[i];
    }
    if (rc == MT_OK && (json = cJSON_PrintUnformatted(hdr)) == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: out of memory", path);
    if (rc == MT_OK)
        rc = af_open(&af, path, err);
    if (rc == MT_OK)
        rc = st_write_header(&af, json, err);
    for (int i = 0; rc == MT_OK && i < n; i++) {
        const mt_ckpt_export_tensor *e = &plan[i];
        size_t bytes = (size_t)counts[i] * 4;
        src = mt_malloc(bytes + 4);
        dst = e->view_rank > 0 ? mt_malloc(bytes + 4) : src;
        if (src == NULL || dst == NULL) {
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export %s: %s: out of memory", path,
                            e->name);
        } else if (e->source == NULL) {
            uint32_t bits;
            memcpy(&bits, &e->fill, 4);
            for (uint64_t k = 0; k < counts[i]; k++)
                dst[k] = bits;
        } else {
            rc = mt_ckpt_read(ck, e->source, src, bytes + 4, err);
            if (rc == MT_OK && e->view_rank > 0)
                map_permute(e, src, dst, counts[i]);
        }
        if (rc == MT_OK) {
            int64_t shape[MT_CKPT_MAX_RANK];
            mt_digest_tensor_desc d = {e->name, "F32", 4, e->rank, shape};
            for (int a = 0; a < e->rank; a++)
                shape[a] = e->shape[a];
            names[i] = e->name;
            rc = mt_digest_tensor_whole(&d, dst, &digests[i], err);
        }
        if (rc == MT_OK)
            rc = af_write(&af, dst, bytes, err);
        if (dst != src)
            mt_free(dst);
        mt_free(src);
        src = dst = NULL;
    }
    if (rc == MT_OK)
        rc = mt_digest_root(names, digests, n, &root, err);
    if (rc == MT_OK)
        rc = st_patch_digest(&af, json, &root, err);
    if (rc == MT_OK)
        rc = af_commit(&af, err);
    else if (af.tmp != NULL)
        af_abort(&af);
out:
    cJSON_free(json);
    cJSON_Delete(hdr);
    mt_free(counts);
    mt_free(names);
    mt_free(digests);
    return rc;
}

/* ------------------------------------------------------------------ safetensors digest */

typedef struct st_file {
    int fd;
    uint64_t data_start; /* 8 + header length */
    uint64_t begin;      /* this tensor's first byte in the data region */
    size_t es;
    const char *path;
} st_file;

static mt_code st_fill(void *ctx, uint64_t first, uint64_t count, void *out, mt_err *err)
{
    const st_file *f = ctx;
    size_t n = (size_t)(count * f->es);
    ssize_t r = pread_all(f->fd, out, n, f->data_start + f->begin + first * f->es);
    if (r != (ssize_t)n)
        return io_err(err, r < 0 ? errno : EIO, "read", f->path);
    return MT_OK;
}

/* Bytes per element of a safetensors dtype name; 0 when unknown. */
static size_t st_dtype_size(const char *dt)
{
    static const char *const sizes[][2] = {
        {"F64", "8"}, {"I64", "8"}, {"U64", "8"},  {"F32", "4"},     {"I32", "4"},
        {"U32", "4"}, {"F16", "2"}, {"BF16", "2"}, {"I16", "2"},     {"U16", "2"},
        {"I8", "1"},  {"U8", "1"},  {"BOOL", "1"}, {"F8_E4M3", "1"}, {"F8_E5M2", "1"}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (strcmp(dt, sizes[i][0]) == 0)
            return (size_t)(sizes[i][1][0] - '0');
    return 0;
}

/* The digest of one header entry (name: item->string) of the file f. */
static mt_code st_entry_digest(st_file *f, uint64_t data_len, const cJSON *item, mt_digest *out,
                               mt_err *err)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    int64_t shape[MT_DIGEST_MAX_RANK];
    mt_digest_tensor_desc d = {item->string, NULL, 0, 0, shape};
    uint64_t count = 1, b, e;

    if (!cJSON_IsString(dt) || (d.elem_size = st_dtype_size(dt->valuestring)) == 0 ||
        !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > MT_DIGEST_MAX_RANK || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: tensor '%s': dtype, shape or data_offsets missing or unsupported",
                          f->path, item->string);
    d.dtype = dt->valuestring;
    d.rank = cJSON_GetArraySize(sh);
    for (int a = 0; a < d.rank; a++) {
        double v = cJSON_GetArrayItem(sh, a)->valuedouble;
        if (!cJSON_IsNumber(cJSON_GetArrayItem(sh, a)) || v < 0 || v > 1e15 ||
            v != (double)(int64_t)v)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: tensor '%s': bad shape", f->path,
                              item->string);
        shape[a] = (int64_t)v;
        count *= (uint64_t)shape[a];
    }
    b = (uint64_t)cJSON_GetArrayItem(of, 0)->valuedouble;
    e = (uint64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
    if (b > e || e > data_len || e - b != count * d.elem_size)
        return mt_err_set(err, MT_DATA_LOSS,
                          "%s: tensor '%s': data_offsets [%llu, %llu) do not fit its shape or the "
                          "file",
                          f->path, item->string, (unsigned long long)b, (unsigned long long)e);
    f->begin = b;
    f->es = d.elem_size;
    return mt_digest_tensor(&d, NULL, 0, st_fill, f, out, err);
}

mt_code mt_ckpt_safetensors_digest(const char *path, mt_digest *root, int *count,
                                   bool *has_recorded, mt_err *err)
{
    st_file f = {-1, 0, 0, 0, path};
    uint8_t lenbuf[8];
    char *json = NULL;
    cJSON *hdr = NULL, *item;
    const char **names = NULL;
    mt_digest *d = NULL, rec;
    struct stat st;
    uint64_t hlen;
    int n = 0, cap;
    mt_code rc = MT_OK;

    *has_recorded = false;
    f.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f.fd < 0)
        return io_err(err, errno, "open", path);
    if (fstat(f.fd, &st) != 0 || pread_all(f.fd, lenbuf, 8, 0) != 8) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a safetensors file (too short)", path);
        goto out;
    }
    hlen = get_le(lenbuf, 8);
    if (hlen < 2 || hlen > HEADER_MAX || hlen > (uint64_t)st.st_size - 8) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a safetensors file (header length)",
                        path);
        goto out;
    }
    json = mt_malloc((size_t)hlen + 1);
    if (json == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        goto out;
    }
    if (pread_all(f.fd, json, (size_t)hlen, 8) != (ssize_t)hlen) {
        rc = io_err(err, errno ? errno : EIO, "read", path);
        goto out;
    }
    json[hlen] = '\0';
    hdr = cJSON_Parse(json);
    if (!cJSON_IsObject(hdr)) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a safetensors file (header JSON)", path);
        goto out;
    }
    f.data_start = 8 + hlen;
    cap = cJSON_GetArraySize(hdr);
    names = mt_calloc((size_t)cap + 1, sizeof(*names));
    d = mt_calloc((size_t)cap + 1, sizeof(*d));
    if (names == NULL || d == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        goto out;
    }
    cJSON_ArrayForEach(item, hdr)
    {
        if (strcmp(item->string, "__metadata__") == 0) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(item, ST_DIGEST_KEY);
            if (cJSON_IsString(m) && mt_digest_parse_hex(m->valuestring, &rec, NULL) == MT_OK)
                *has_recorded = true;
            continue;
        }
        rc = st_entry_digest(&f, (uint64_t)st.st_size - f.data_start, item, &d[n], err);
        if (rc != MT_OK)
            goto out;
        names[n++] = item->string;
    }
    rc = mt_digest_root(names, d, n, root, err);
    if (rc == MT_OK && *has_recorded && !mt_digest_equal(root, &rec)) {
        char a[MT_DIGEST_HEX], b[MT_DIGEST_HEX];
        rc = mt_err_set(err, MT_DATA_LOSS,
                        "%s: the data's Merkle root %s differs from the recorded %s", path,
                        mt_digest_hex(root, a), mt_digest_hex(&rec, b));
    }
    if (count != NULL)
        *count = n;
out:
    mt_free(names);
    mt_free(d);
    cJSON_Delete(hdr);
    mt_free(json);
    close(f.fd);
    return rc;
}

/* ------------------------------------------------------------------ directory */

mt_code mt_ckpt_path(char *buf, size_t n, const char *dir, uint64_t step, mt_err *err)
{
    int w = snprintf(buf, n, "%s/ckpt-%llu.mtc", dir, (unsigned long long)step);

    if (w < 0 || (size_t)w >= n)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint directory %s: path too long", dir);
    return MT_OK;
}

/* 1 when name is "ckpt-<decimal>.mtc", with the step in *step. */
static int parse_name(const char *name, uint64_t *step)
{
    const char *p = name + 5;
    uint64_t v = 0;
    int digits = 0;

    if (strncmp(name, "ckpt-", 5) != 0)
        return 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (digits == 0 || strcmp(p, ".mtc") != 0)
        return 0;
    *step = v;
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

mt_code mt_ckpt_list(const char *dir, uint64_t **steps, int *n, mt_err *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t *v = NULL;
    int cnt = 0, cap = 0;

    *steps = NULL;
    *n = 0;
    if (d == NULL)
        return io_err(err, errno, "checkpoint directory", dir);
    while ((e = readdir(d)) != NULL) {
        uint64_t s;
        if (!parse_name(e->d_name, &s))
            continue;
        if (cnt == cap) {
            int nc = cap ? 2 * cap : 16;
            uint64_t *nv = mt_realloc(v, (size_t)nc * sizeof(*nv));
            if (nv == NULL) {
                mt_free(v);
                closedir(d);
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                                  "checkpoint directory %s: out of memory", dir);
            }
            v = nv;
            cap = nc;
        }
        v[cnt++] = s;
    }
    closedir(d);
    if (cnt > 0)
        qsort(v, (size_t)cnt, sizeof(*v), cmp_u64);
    *steps = v;
    *n = cnt;
    return MT_OK;
}

mt_code mt_ckpt_latest(const char *dir, uint64_t *step, mt_err *err)
{
    uint64_t *v;
    int n;
    mt_code rc = mt_ckpt_list(dir, &v, &n, err);

    if (rc != MT_OK)
        return rc;
    if (n == 0)
        return mt_err_set(err, MT_NOT_FOUND, "checkpoint directory %s: no ckpt-<step>.mtc file",
                          dir);
    *step = v[n - 1];
    mt_free(v);
    return MT_OK;
}

mt_code mt_ckpt_retain(const char *dir, int keep, int *removed, mt_err *err)
{
    uint64_t *v;
    int n, gone = 0;
    mt_code rc;

    if (removed != NULL)
        *removed = 0;
    if (keep < 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "checkpoint retention: keep must be >= 1, got %d", keep);
    rc = mt_ckpt_list(dir, &v, &n, err);
    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < n - keep; i++) {
        char path[4096];
        rc = mt_ckpt_path(path, sizeof(path), dir, v[i], err);
        if (rc != MT_OK)
            break;
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = io_err(err, errno, "remove old checkpoint", path);
            break;
        }
        gone++;
    }
    mt_free(v);
    if (removed != NULL)
        *removed = gone;
    return rc;
}
