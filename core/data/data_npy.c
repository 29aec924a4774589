/* SPDX-License-Identifier: MIT */
/*
 * data_npy.c — NumPy source: (x, y) arrays from a pair of .npy files or from one .npz archive.
 *
 * Called through mt_data__npy_source by the dataset layer; the parsers are also the fuzz target's
 * (tests/fuzz/fuzz_npy.c). Calls zlib (inflate, crc32) for deflated .npz members.
 * Format (numpy.lib.format, versions 1.0, 2.0 and 3.0): the magic "\x93NUMPY", a version, a
 * header length, a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...)}
 * and the raw C-order data. Supported dtypes: b1, u1, i1, u2, i2, u4, i4, u8, i8 (any byte order)
 * and f4, f8; Fortran-order arrays, object and string dtypes are refused with the reason. An .npz
 * is a zip archive (numpy.savez: stored; numpy.savez_compressed: deflated) whose members are
 * .npy files named KEY.npy; ZIP64 records are read. Every member's CRC-32 is checked.
 * Semantics: x has shape (N, ...): an example is x[i] flattened in C order; (N, H, W, C) and
 * (N, H, W) are images (H, W, C) / (H, W, 1). y has shape (N) or (N, 1) of integers for one
 * class label per example, (N, d1, ...) of integers for d1·... labels per example (a label per
 * output row: per pixel, per token), or (N, K) for K float targets ("label_type": "float"). x is
 * multiplied by "scale"; every x value must be finite. Any violation fails the file with its name
 * and the cause. Threading: stateless. Tests: tests/unit/test_data_npy.c; fuzz:
 * tests/fuzz/fuzz_npy.c.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

#define MAX_ELEMS ((size_t)1 << 32) /* 16 GiB of float32: refused above */

void mt_data__array_fini(mt_data__array *a)
{
    if (a == NULL)
        return;
    mt_free(a->f);
    memset(a, 0, sizeof(*a));
}

/* ------------------------------------------------------------------ .npy */

/* The dtype of an array: kind 'b', 'u', 'i' or 'f', size in bytes, byte order. */
typedef struct npy_dtype {
    char kind;
    size_t size;
    bool big; /* big-endian ('>') */
} npy_dtype;

/* Find 'key': in the header dict; returns the position after the colon or NULL. */
static const char *dict_value(const char *h, size_t n, const char *key)
{
    size_t k = strlen(key);

    for (size_t i = 0; i + k + 2 < n; i++) {
        if ((h[i] == '\'' || h[i] == '"') && memcmp(h + i + 1, key, k) == 0 &&
            h[i + 1 + k] == h[i]) {
            const char *p = h + i + k + 2;
            while (p < h + n && (*p == ' ' || *p == '\t'))
                p++;
            if (p < h + n && *p == ':') {
                p++;
                while (p < h + n && (*p == ' ' || *p == '\t'))
                    p++;
                return p;
            }
        }
    }
    return NULL;
}

static mt_code parse_descr(const char *h, size_t n, const char *name, npy_dtype *dt, mt_err *err)
{
    const char *p = dict_value(h, n, "descr"), *end = h + n;
    char q, ds[16];
    size_t k = 0;

    if (p == NULL || p >= end || (*p != '\'' && *p != '"'))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: not a .npy array of a simple dtype (header has no 'descr' string)",
                          name);
    q = *p++;
    while (p < end && *p != q && k + 1 < sizeof(ds))
        ds[k++] = *p++;
    ds[k] = '\0';
    if (p >= end || *p != q || k < 2 || k > 4)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: dtype '%s' is not supported "
                          "(u1 i1 u2 i2 u4 i4 u8 i8 f4 f8, b1)",
                          name, ds);
    dt->big = ds[0] == '>';
    if (strchr("<>|=", ds[0]) == NULL || strchr("buif", ds[1]) == NULL || ds[2] < '1' ||
        ds[2] > '8' || ds[3] != '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: dtype '%s' is not supported (u1 i1 u2 i2 u4 i4 u8 i8 f4 f8, b1)",
                          name, ds);
    dt->kind = ds[1];
    dt->size = (size_t)(ds[2] - '0');
    if ((dt->size != 1 && dt->size != 2 && dt->size != 4 && dt->size != 8) ||
        (dt->kind == 'f' && dt->size < 4) || (dt->kind == 'b' && dt->size != 1))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: dtype '%s' is not supported (u1 i1 u2 i2 u4 i4 u8 i8 f4 f8, b1)",
                          name, ds);
    return MT_OK;
}

static mt_code parse_shape(const char *h, size_t n, const char *name, mt_data__array *a,
                           mt_err *err)
{
    const char *p = dict_value(h, n, "shape"), *end = h + n;

    a->rank = 0;
    a->count = 1;
    if (p == NULL || p >= end || *p != '(')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: .npy header has no 'shape' tuple", name);
    p++;
    for (;;) {
        size_t v = 0;
        while (p < end && (*p == ' ' || *p == ','))
            p++;
        if (p < end && *p == ')')
            break;
        if (p >= end || *p < '0' || *p > '9' || a->rank == MT_DATA__NPY_MAX_RANK)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: .npy shape is not a tuple of at most %d sizes", name,
                              MT_DATA__NPY_MAX_RANK);
        while (p < end && *p >= '0' && *p <= '9') {
            v = v * 10 + (size_t)(*p++ - '0');
            if (v > MAX_ELEMS)
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: .npy shape too large", name);
        }
        if (p < end && *p == 'L')
            p++;
        a->dims[a->rank++] = v;
        if (v != 0 && a->count > MAX_ELEMS / v)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: .npy array too large (over 2^32 "
                              "elements)",
                              name);
        a->count *= v;
    }
    return MT_OK;
}

/* Element i of raw data as a double. */
static double elem(const unsigned char *d, const npy_dtype *dt, size_t i)
{
    unsigned char b[8];
    uint64_t u = 0;

    for (size_t k = 0; k < dt->size; k++) /* to big-endian order in b */
        b[k] = dt->big ? d[i * dt->size + k] : d[i * dt->size + dt->size - 1 - k];
    for (size_t k = 0; k < dt->size; k++)
        u = u << 8 | b[k];
    switch (dt->kind) {
    case 'b':
        return u != 0;
    case 'u':
        return (double)u;
    case 'i': {
        unsigned bits = (unsigned)dt->size * 8;
        if (bits < 64 && (u >> (bits - 1)) & 1)
            return (double)(int64_t)(u | ~(uint64_t)0 << bits);
        return (double)(int64_t)u;
    }
    default:
        if (dt->size == 4) {
            uint32_t w = (uint32_t)u;
            float f;
            memcpy(&f, &w, 4);
            return f;
        } else {
            double f;
            memcpy(&f, &u, 8);
            return f;
        }
    }
}

mt_code mt_data__npy_parse(const unsigned char *buf, size_t len, const char *name,
                           mt_data__array *out, mt_err *err)
{
    size_t hlen, off;
    npy_dtype dt = {0, 1, false};
    const char *h;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a .npy file (no \\x93NUMPY magic)",
                          name);
    if (buf[6] == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else if ((buf[6] == 2 || buf[6] == 3) && len >= 12) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        off = 12;
    } else {
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: .npy format version %d.%d is not "
                          "supported (1.0, 2.0, 3.0)",
                          name, buf[6], len > 7 ? buf[7] : 0);
    }
    if (hlen > len - off)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: truncated .npy header (%zu of %zu bytes)",
                          name, len - off, hlen);
    h = (const char *)buf + off;
    if ((rc = parse_descr(h, hlen, name, &dt, err)) != MT_OK ||
        (rc = parse_shape(h, hlen, name, out, err)) != MT_OK)
        return rc;
    {
        const char *fo = dict_value(h, hlen, "fortran_order");
        if (fo == NULL || (size_t)(h + hlen - fo) < 4 ||
            (memcmp(fo, "True", 4) != 0 && memcmp(fo, "False", 4) != 0))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: .npy header has no 'fortran_order' flag", name);
        if (memcmp(fo, "True", 4) == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: Fortran-order arrays are not supported (save "
                              "numpy.ascontiguousarray(a))",
                              name);
    }
    off += hlen;
    if (out->count > (len - off) / dt.size)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: truncated: the header promises %zu bytes of data, %zu present", name,
                          out->count * dt.size, len - off);
    if (out->count * dt.size != len - off)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu bytes after the %zu bytes of data (corrupt or not one array)",
                          name, len - off - out->count * dt.size, out->count * dt.size);
    out->integer = dt.kind != 'f';
    out->f = mt_malloc(out->count * sizeof(float) + 1);
    if (out->f == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
    for (size_t i = 0; i < out->count; i++)
        out->f[i] = (float)elem(buf + off, &dt, i);
    return MT_OK;
}

/* ------------------------------------------------------------------ .npz */

static uint32_t rd16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t rd32(const unsigned char *p)
{
    return rd16(p) | rd16(p + 2) << 16;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* One central-directory entry. */
typedef struct zip_entry {
    const unsigned char *name;
    size_t name_len;
    uint32_t method, crc;
    uint64_t csize, usize, offset;
} zip_entry;

/* Locate the central directory: *cd offset and *entries. */
static mt_code zip_directory(const unsigned char *z, size_t len, const char *name, uint64_t *cd,
                             uint64_t *entries, mt_err *err)
{
    size_t i;

    if (len < 22)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not an .npz (zip) archive", name);
    for (i = len - 22;; i--) {
        if (rd32(z + i) == 0x06054b50 && i + 22 + rd16(z + i + 20) == len)
            break;
        if (i == 0 || len - i > 22 + 65535)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: not an .npz (zip) archive or truncated (no end record)", name);
    }
    *entries = rd16(z + i + 10);
    *cd = rd32(z + i + 16);
    if ((*cd == 0xffffffffu || *entries == 0xffff) && i >= 20 && rd32(z + i - 20) == 0x07064b50) {
        uint64_t r = rd64(z + i - 20 + 8);
        if (len < 56 || r > len - 56 || rd32(z + r) != 0x06064b50)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: corrupt ZIP64 end record", name);
        *entries = rd64(z + r + 32);
        *cd = rd64(z + r + 48);
    }
    if (*cd > len)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: truncated (central directory at %llu of "
                          "%zu bytes)",
                          name, (unsigned long long)*cd, len);
    return MT_OK;
}

/* Read the entry at *pos of the central directory and advance *pos. */
static mt_code zip_entry_at(const unsigned char *z, size_t len, const char *name, size_t *pos,
                            zip_entry *e, mt_err *err)
{
    const unsigned char *p = z + *pos;
    size_t extra, comment;

    if (len - *pos < 46 || rd32(p) != 0x02014b50)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: corrupt zip central directory", name);
    e->method = rd16(p + 10);
    e->crc = rd32(p + 16);
    e->csize = rd32(p + 20);
    e->usize = rd32(p + 24);
    e->name_len = rd16(p + 28);
    extra = rd16(p + 30);
    comment = rd16(p + 32);
    e->offset = rd32(p + 42);
    e->name = p + 46;
    if (len - *pos - 46 < e->name_len + extra + comment)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: corrupt zip central directory", name);
    for (size_t x = 0; x + 4 <= extra;) { /* ZIP64 extended information */
        const unsigned char *f = p + 46 + e->name_len + x;
        size_t sz = rd16(f + 2), at = 4;
        if (x + 4 + sz > extra)
            break;
        if (rd16(f) == 0x0001) {
            uint64_t *v[3] = {&e->usize, &e->csize, &e->offset};
            for (int k = 0; k < 3; k++) {
                if (*v[k] == 0xffffffffu && at + 8 <= 4 + sz) {
                    *v[k] = rd64(f + at);
                    at += 8;
                }
            }
        }
        x += 4 + sz;
    }
    *pos += 46 + e->name_len + extra + comment;
    return MT_OK;
}

/* Extract entry e: stored or deflated, CRC checked. */
static mt_code zip_extract(const unsigned char *z, size_t len, const char *name, const zip_entry *e,
                           unsigned char **data, size_t *data_len, mt_err *err)
{
    const unsigned char *p;
    unsigned char *out;
    uint64_t at;

    if (e->offset > len || len - e->offset < 30 || rd32(z + e->offset) != 0x04034b50)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: member %.*s: bad local header", name,
                          (int)e->name_len, (const char *)e->name);
    at = e->offset + 30 + rd16(z + e->offset + 26) + rd16(z + e->offset + 28);
    if (at > len || e->csize > len - at)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: truncated: member %.*s needs %llu bytes",
                          name, (int)e->name_len, (const char *)e->name,
                          (unsigned long long)e->csize);
    if (e->method != 0 && e->method != 8)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: member %.*s: compression method %u (only stored and deflated)", name,
                          (int)e->name_len, (const char *)e->name, e->method);
    /* deflate expands at most ~1032:1; a larger claim is a corrupt (or hostile) header */
    if (e->usize > MAX_ELEMS * 8 || (e->method == 0 && e->usize != e->csize) ||
        e->usize > e->csize * 1032 + 64)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: member %.*s: implausible size %llu", name,
                          (int)e->name_len, (const char *)e->name, (unsigned long long)e->usize);
    p = z + at;
    out = mt_malloc((size_t)e->usize + 1);
    if (out == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
    if (e->method == 0) {
        memcpy(out, p, (size_t)e->usize);
    } else {
        z_stream s;
        int r;
        memset(&s, 0, sizeof(s));
        if (inflateInit2(&s, -MAX_WBITS) != Z_OK) {
            mt_free(out);
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: inflate: out of memory", name);
        }
        s.next_in = (Bytef *)p;
        s.avail_in = (uInt)e->csize;
        s.next_out = out;
        s.avail_out = (uInt)e->usize;
        r = inflate(&s, Z_FINISH);
        inflateEnd(&s);
        if (r != Z_STREAM_END || s.total_out != e->usize) {
            mt_free(out);
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: member %.*s: corrupt deflate data",
                              name, (int)e->name_len, (const char *)e->name);
        }
    }
    if (crc32(0L, out, (uInt)e->usize) != e->crc) {
        mt_free(out);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: member %.*s: CRC mismatch (corrupt)", name,
                          (int)e->name_len, (const char *)e->name);
    }
    *data = out;
    *data_len = (size_t)e->usize;
    return MT_OK;
}

mt_code mt_data__npz_member(const unsigned char *z, size_t len, const char *name, const char *key,
                            unsigned char **data, size_t *data_len, mt_err *err)
{
    char list[160];
    size_t used = 0, pos, klen = strlen(key);
    uint64_t cd = 0, entries = 0;
    zip_entry e;
    mt_code rc;

    memset(&e, 0, sizeof(e));
    *data = NULL;
    *data_len = 0;
    list[0] = '\0';
    rc = zip_directory(z, len, name, &cd, &entries, err);
    if (rc != MT_OK)
        return rc;
    pos = (size_t)cd;
    for (uint64_t i = 0; i < entries; i++) {
        rc = zip_entry_at(z, len, name, &pos, &e, err);
        if (rc != MT_OK)
            return rc;
        if (e.name_len == klen + 4 && memcmp(e.name, key, klen) == 0 &&
            memcmp(e.name + klen, ".npy", 4) == 0)
            return zip_extract(z, len, name, &e, data, data_len, err);
        if (used + e.name_len + 3 < sizeof(list) - 4) {
            int w =
                snprintf(list + used, sizeof(list) - used, "%s%.*s", used ? ", " : "",
                         (int)(e.name_len > 4 ? e.name_len - 4 : e.name_len), (const char *)e.name);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no array '%s' in the archive (arrays: %s)",
                      name, key, used ? list : "none");
}

/* ------------------------------------------------------------------ blocks */

mt_code mt_data__npy_block(const mt_data_spec *s, const char *xname, const char *yname,
                           mt_data__array *x, mt_data__array *y, mt_data_block *out, mt_err *err)
{
    bool as_float = s->label_type == MT_DATA_LABEL_FLOAT;
    size_t n, dim = 1, tdim = 1;

    memset(out, 0, sizeof(*out));
    if (x->rank < 1 || x->dims[0] == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: x has no examples (shape needs (N, ...) "
                          "with N >= 1)",
                          xname);
    n = x->dims[0];
    for (int i = 1; i < x->rank; i++)
        dim *= x->dims[i];
    if (dim == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: x examples are empty", xname);
    if (y->rank < 1 || y->dims[0] != n)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: %zu labels for the %zu examples of %s",
                          yname, y->rank < 1 ? 0 : y->dims[0], n, xname);
    for (int i = 1; i < y->rank; i++)
        tdim *= y->dims[i];
    if (!as_float && !y->integer)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: float dtype for class labels; give integer class ids or "
                          "\"label_type\": \"float\" (regression)",
                          yname);
    if (tdim == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no targets per example", yname);
    for (size_t i = 0; i < x->count; i++) {
        if (!isfinite(x->f[i]))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: x value %zu (example %zu) is not "
                              "finite",
                              xname, i, i / dim);
        x->f[i] *= s->scale;
    }
    for (size_t i = 0; i < n * tdim; i++) {
        float v = y->f[i];
        if (!isfinite(v))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: target of example %zu is not finite",
                              yname, i / tdim);
        if (!as_float &&
            (v < 0 || v > (float)INT32_MAX || (s->num_classes > 0 && v >= (float)s->num_classes)))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: label %.0f of example %zu outside "
                              "[0, %d)",
                              yname, (double)v, i / tdim,
                              s->num_classes > 0 ? s->num_classes : INT32_MAX);
    }
    out->y_dim = as_float ? 1 : tdim;
    out->y = mt_calloc(n * out->y_dim + 1, sizeof(int32_t));
    if (out->y == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", yname);
    if (as_float) {
        out->t = y->f; /* adopt */
        out->t_dim = tdim;
        y->f = NULL;
    } else {
        for (size_t i = 0; i < n * tdim; i++)
            out->y[i] = (int32_t)y->f[i];
    }
    out->n = n;
    out->dim = dim;
    out->x = x->f; /* adopt */
    x->f = NULL;
    if (x->rank == 4 || x->rank == 3) {
        out->shape[0] = x->dims[1];
        out->shape[1] = x->dims[2];
        out->shape[2] = x->rank == 4 ? x->dims[3] : 1;
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ source */

/* Decode one array of f: `x` (which = 0) or `y` (1), from its .npy or from the .npz. */
static mt_code read_array(const mt_data_spec *s, const mt_data_file *f, int which,
                          mt_data__array *a, mt_err *err)
{
    const char *path = which == 0 || f->labels_path == NULL ? f->path : f->labels_path;
    unsigned char *buf = NULL, *mem = NULL;
    size_t len = 0, mlen = 0;
    mt_code rc = mt_data__read_all(path, &buf, &len, err);

    memset(a, 0, sizeof(*a));
    if (rc != MT_OK)
        return rc;
    if (f->labels_path != NULL) {
        rc = mt_data__npy_parse(buf, len, path, a, err);
    } else {
        const char *key = which == 0 ? s->x_key : s->y_key;
        char mname[1200];
        rc = mt_data__npz_member(buf, len, path, key != NULL ? key : (which ? "y" : "x"), &mem,
                                 &mlen, err);
        snprintf(mname, sizeof(mname), "%s[%s]", path, key != NULL ? key : (which ? "y" : "x"));
        if (rc == MT_OK)
            rc = mt_data__npy_parse(mem, mlen, mname, a, err);
        mt_free(mem);
    }
    mt_free(buf);
    return rc;
}

static mt_code npy_count(const mt_data_spec *s, const mt_data_file *f, const mt_data__fit *fit,
                         size_t *n, mt_err *err)
{
    mt_data__array y;
    mt_code rc = read_array(s, f, 1, &y, err);

    (void)fit;
    *n = 0;
    if (rc != MT_OK)
        return rc;
    *n = y.rank >= 1 ? y.dims[0] : 0;
    mt_data__array_fini(&y);
    if (*n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no examples", f->path);
    return MT_OK;
}

static mt_code npy_load(const mt_data_spec *s, const mt_data_file *f, const mt_data__fit *fit,
                        mt_data_block *out, mt_err *err)
{
    char xn[1200], yn[1200];
    mt_data__array x, y;
    mt_code rc;

    (void)fit;
    memset(out, 0, sizeof(*out));
    memset(&y, 0, sizeof(y));
    rc = read_array(s, f, 0, &x, err);
    if (rc == MT_OK)
        rc = read_array(s, f, 1, &y, err);
    if (f->labels_path != NULL) {
        snprintf(xn, sizeof(xn), "%s", f->path);
        snprintf(yn, sizeof(yn), "%s", f->labels_path);
    } else {
        snprintf(xn, sizeof(xn), "%s[%s]", f->path, s->x_key != NULL ? s->x_key : "x");
        snprintf(yn, sizeof(yn), "%s[%s]", f->path, s->y_key != NULL ? s->y_key : "y");
    }
    if (rc == MT_OK)
        rc = mt_data__npy_block(s, xn, yn, &x, &y, out, err);
    mt_data__array_fini(&x);
    mt_data__array_fini(&y);
    return rc;
}

const mt_data__source mt_data__npy_source = {"npy", npy_count, npy_load, NULL};
