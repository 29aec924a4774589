/* SPDX-License-Identifier: MIT */
/*
 * mt_idx.c — IDX decoding (contract in mt_idx.h).
 *
 * DESIGN: the header (magic, type, rank, dims) is parsed first by one function
 * shared by the memory and file paths; the expected payload size follows from
 * it, so the file path allocates exactly once and then reads one byte more to
 * detect trailing garbage. gzread() reads plain files transparently.
 * Threading: none shared. Tests: tests/unit/test_idx.c, tests/fuzz/fuzz_idx.c.
 */
#include "data/mt_idx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"

static size_t idx_elem_size(int type)
{
    switch (type) {
    case MT_IDX_UBYTE:
    case MT_IDX_SBYTE:
        return 1;
    case MT_IDX_INT16:
        return 2;
    case MT_IDX_INT32:
    case MT_IDX_FLOAT32:
        return 4;
    case MT_IDX_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Validate the 4-byte magic in h[0..3]; sets type, rank and elem_size. */
static mt_code idx_parse_magic(const unsigned char *h, const char *name, mt_idx *x, mt_err *err)
{
    if (h[0] != 0 || h[1] != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: bad IDX magic %02x%02x%02x%02x (first two bytes must be zero)", name,
                          h[0], h[1], h[2], h[3]);
    x->type = h[2];
    x->elem_size = idx_elem_size(h[2]);
    if (x->elem_size == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: unknown IDX type byte 0x%02x", name, h[2]);
    x->rank = h[3];
    if (x->rank < 1 || x->rank > MT_IDX_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: IDX rank %d not in 1..%d", name, x->rank,
                          MT_IDX_MAX_RANK);
    return MT_OK;
}

/* Parse rank big-endian dims from d; sets dims and count; refuses zero inner dims and sizes over
 * MT_IDX_MAX_BYTES. */
static mt_code idx_parse_dims(const unsigned char *d, const char *name, mt_idx *x, mt_err *err)
{
    size_t count = 1;

    for (int i = 0; i < x->rank; i++) {
        x->dims[i] = be32(d + 4 * i);
        if (x->dims[i] == 0 && i > 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: IDX dimension %d is zero", name, i);
        if (x->dims[i] != 0 && count > MT_IDX_MAX_BYTES / x->elem_size / x->dims[i])
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: IDX dimensions too large (over %zu bytes)", name,
                              (size_t)MT_IDX_MAX_BYTES);
        count *= x->dims[i];
    }
    x->count = count;
    return MT_OK;
}

mt_code mt_idx_read_mem(const void *buf, size_t len, const char *name, mt_idx *out, mt_err *err)
{
    const unsigned char *p = buf;
    mt_idx x = {0};
    size_t hdr, bytes;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (name == NULL)
        name = "<memory>";
    if (len < 4)
        return mt_err_set(err, MT_DATA_LOSS, "%s: truncated IDX header (%zu of 4 bytes)", name,
                          len);
    rc = idx_parse_magic(p, name, &x, err);
    if (rc != MT_OK)
        return rc;
    hdr = 4 + 4 * (size_t)x.rank;
    if (len < hdr)
        return mt_err_set(err, MT_DATA_LOSS, "%s: truncated IDX header (%zu of %zu bytes)", name,
                          len, hdr);
    rc = idx_parse_dims(p + 4, name, &x, err);
    if (rc != MT_OK)
        return rc;
    bytes = x.count * x.elem_size;
    if (len - hdr < bytes)
        return mt_err_set(err, MT_DATA_LOSS,
                          "%s: truncated IDX payload: dimensions need %zu bytes, %zu present", name,
                          bytes, len - hdr);
    if (len - hdr > bytes)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu trailing bytes after the IDX payload of %zu bytes", name,
                          len - hdr - bytes, bytes);
    x.data = mt_malloc(bytes ? bytes : 1);
    if (x.data == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu bytes", name,
                          bytes);
    memcpy(x.data, p + hdr, bytes);
    *out = x;
    return MT_OK;
}

/* Read exactly n bytes (or fewer at EOF) into buf; -1 on a gzip error. */
static long long idx_gz_read(gzFile f, unsigned char *buf, size_t n)
{
    size_t got = 0;

    while (got < n) {
        size_t chunk = n - got;
        int r;
        if (chunk > (1u << 30))
            chunk = 1u << 30;
        r = gzread(f, buf + got, (unsigned)chunk);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long long)got;
}

static mt_code idx_gz_fail(gzFile f, const char *path, const char *what, size_t want, size_t got,
                           mt_err *err)
{
    int zcode = Z_OK;
    const char *zmsg = gzerror(f, &zcode);

    if (zcode != Z_OK && zcode != Z_BUF_ERROR)
        return mt_err_set(err, MT_DATA_LOSS, "%s: corrupt gzip stream while reading %s: %s", path,
                          what, zmsg);
    return mt_err_set(err, MT_DATA_LOSS, "%s: truncated %s: %zu of %zu bytes present", path, what,
                      got, want);
}

mt_code mt_idx_read_file(const char *path, mt_idx *out, mt_err *err)
{
    unsigned char hdr[4 + 4 * MT_IDX_MAX_RANK];
    unsigned char extra;
    mt_idx x = {0};
    gzFile f;
    long long r;
    size_t bytes;
    mt_code rc;
    int fd;

    memset(out, 0, sizeof(*out));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        mt_code c = e == ENOENT   ? MT_NOT_FOUND
                    : e == EACCES ? MT_PERMISSION_DENIED
                                  : MT_INVALID_ARGUMENT;
        return mt_err_set(err, c, "open %s: %s", path, strerror(e));
    }
    f = gzdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: cannot start zlib reader", path);
    }
    r = idx_gz_read(f, hdr, 4);
    if (r != 4) {
        rc = idx_gz_fail(f, path, "IDX header", 4, r < 0 ? 0 : (size_t)r, err);
        goto fail;
    }
    rc = idx_parse_magic(hdr, path, &x, err);
    if (rc != MT_OK)
        goto fail;
    r = idx_gz_read(f, hdr + 4, 4 * (size_t)x.rank);
    if (r != 4 * (long long)x.rank) {
        rc = idx_gz_fail(f, path, "IDX header", 4 + 4 * (size_t)x.rank, 4 + (r < 0 ? 0 : (size_t)r),
                         err);
        goto fail;
    }
    rc = idx_parse_dims(hdr + 4, path, &x, err);
    if (rc != MT_OK)
        goto fail;
    bytes = x.count * x.elem_size;
    x.data = mt_malloc(bytes ? bytes : 1);
    if (x.data == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu bytes", path, bytes);
        goto fail;
    }
    r = idx_gz_read(f, x.data, bytes);
    if (r < 0 || (size_t)r != bytes) {
        rc = idx_gz_fail(f, path, "IDX payload", bytes, r < 0 ? 0 : (size_t)r, err);
        goto fail;
    }
    r = idx_gz_read(f, &extra, 1);
    if (r < 0) {
        rc = idx_gz_fail(f, path, "end of file", 0, 0, err);
        goto fail;
    }
    if (r > 0) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s: trailing bytes after the IDX payload of %zu bytes", path, bytes);
        goto fail;
    }
    gzclose(f);
    *out = x;
    return MT_OK;
fail:
    mt_free(x.data);
    gzclose(f);
    return rc;
}

void mt_idx_fini(mt_idx *idx)
{
    if (idx == NULL)
        return;
    mt_free(idx->data);
    memset(idx, 0, sizeof(*idx));
}

mt_code mt_idx_to_images(const mt_idx *idx, const char *name, float **pixels, size_t *n, size_t *h,
                         size_t *w, size_t *c, mt_err *err)
{
    float *px;

    *pixels = NULL;
    if (idx->type != MT_IDX_UBYTE || (idx->rank != 3 && idx->rank != 4))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: images must be unsigned bytes of rank 3 or 4 (got type 0x%02x, "
                          "rank %d)",
                          name, idx->type, idx->rank);
    px = mt_malloc(idx->count ? idx->count * sizeof(float) : 1);
    if (px == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu pixels", name,
                          idx->count);
    for (size_t i = 0; i < idx->count; i++)
        px[i] = (float)idx->data[i] * (1.0f / 255.0f);
    *pixels = px;
    *n = idx->dims[0];
    *h = idx->dims[1];
    *w = idx->dims[2];
    *c = idx->rank == 4 ? idx->dims[3] : 1;
    return MT_OK;
}

mt_code mt_idx_to_labels(const mt_idx *idx, const char *name, int num_classes, int32_t **labels,
                         size_t *n, mt_err *err)
{
    int32_t *lab;

    *labels = NULL;
    if (idx->type != MT_IDX_UBYTE || idx->rank != 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: labels must be unsigned bytes of rank 1 (got type 0x%02x, rank %d)",
                          name, idx->type, idx->rank);
    lab = mt_malloc(idx->count ? idx->count * sizeof(int32_t) : 1);
    if (lab == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu labels", name,
                          idx->count);
    for (size_t i = 0; i < idx->count; i++) {
        lab[i] = idx->data[i];
        if (num_classes > 0 && lab[i] >= num_classes) {
            mt_free(lab);
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: label %d at index %zu is not < %d",
                              name, (int)idx->data[i], i, num_classes);
        }
    }
    *labels = lab;
    *n = idx->count;
    return MT_OK;
}

mt_code mt_idx_set_load(const char *images_path, const char *labels_path, int num_classes,
                        mt_idx_set *out, mt_err *err)
{
    mt_idx x = {0};
    mt_idx_set s = {0};
    size_t nl = 0;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    rc = mt_idx_read_file(images_path, &x, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_idx_to_images(&x, images_path, &s.images, &s.n, &s.h, &s.w, &s.c, err);
    mt_idx_fini(&x);
    if (rc != MT_OK)
        goto fail;
    rc = mt_idx_read_file(labels_path, &x, err);
    if (rc != MT_OK)
        goto fail;
    rc = mt_idx_to_labels(&x, labels_path, num_classes, &s.labels, &nl, err);
    mt_idx_fini(&x);
    if (rc != MT_OK)
        goto fail;
    if (nl != s.n) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s has %zu images but %s has %zu labels",
                        images_path, s.n, labels_path, nl);
        goto fail;
    }
    *out = s;
    return MT_OK;
fail:
    mt_idx_set_fini(&s);
    return rc;
}

void mt_idx_set_fini(mt_idx_set *set)
{
    if (set == NULL)
        return;
    mt_free(set->images);
    mt_free(set->labels);
    mt_free(set->targets);
    memset(set, 0, sizeof(*set));
}
