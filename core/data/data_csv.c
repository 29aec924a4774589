/* SPDX-License-Identifier: MIT */
/*
 * data_csv.c — CSV source: numeric feature columns plus an integer label column.
 *
 * Called through mt_data__csv_source by the dataset layer, and by the spec parser for the header
 * check. Format: one record per line ('\n', an optional trailing '\r'), fields separated by the
 * spec's delimiter, no quoting; lines holding nothing (or only '\r') are skipped; with
 * "header": true the first such line names the columns. Every record must have the header's (or
 * the first record's) number of fields; every feature must be a finite number and the label an
 * integer (in [0, num_classes) when set). Any violation fails the whole file with FILE:LINE.
 * Integers (the common pixel case) take a fast exact path; other numbers go through strtof.
 * Threading: stateless. Tests: tests/unit/test_data_csv.c; fuzz: tests/fuzz/fuzz_csv.c.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

/* Column roles, resolved once per file from the header (or the first record). */
enum { COL_SKIP = -1, COL_LABEL = -2 };

typedef struct csv_cols {
    size_t ncols; /* fields per record */
    char **names; /* owned; ncols names, or NULL without a header */
    int *slot;    /* owned; per column: COL_SKIP, COL_LABEL or the feature position */
    size_t nfeat; /* features per example */
    size_t label; /* label column */
} csv_cols;

static void cols_fini(csv_cols *c)
{
    if (c->names != NULL)
        for (size_t i = 0; i < c->ncols; i++)
            mt_free(c->names[i]);
    mt_free(c->names);
    mt_free(c->slot);
    memset(c, 0, sizeof(*c));
}

static size_t trim(const char **s, size_t n)
{
    while (n > 0 && (**s == ' ' || **s == '\t'))
        (*s)++, n--;
    while (n > 0 && ((*s)[n - 1] == ' ' || (*s)[n - 1] == '\t'))
        n--;
    return n;
}

/* Count fields of a line. */
static size_t count_fields(const char *line, size_t len, char delim)
{
    size_t n = 1;
    for (size_t i = 0; i < len; i++)
        n += line[i] == delim;
    return n;
}

/* Strip trailing '\r'; returns the new length. */
static size_t chomp(char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    line[len] = '\0';
    return len;
}

/* Number: fast path for up to 7 decimal digits (exact in float), strtof otherwise. */
static int parse_float(const char *s, size_t n, float *out)
{
    char tmp[64];
    char *end;
    size_t i = 0;
    int neg = 0;
    int32_t v = 0;

    n = trim(&s, n);
    if (n == 0)
        return -1;
    if (s[0] == '-' || s[0] == '+')
        neg = s[0] == '-', i = 1;
    if (n - i >= 1 && n - i <= 7) {
        size_t j = i;
        while (j < n && s[j] >= '0' && s[j] <= '9')
            v = v * 10 + (s[j++] - '0');
        if (j == n) {
            *out = (float)(neg ? -v : v);
            return 0;
        }
    }
    if (n >= sizeof(tmp))
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    errno = 0;
    *out = strtof(tmp, &end);
    if (end != tmp + n || !isfinite(*out))
        return -1;
    return 0;
}

static int parse_label(const char *s, size_t n, int32_t *out)
{
    char tmp[64];
    char *end;
    double d;

    n = trim(&s, n);
    if (n == 0 || n >= sizeof(tmp))
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    d = strtod(tmp, &end);
    if (end != tmp + n || d != floor(d) || d < INT32_MIN || d > INT32_MAX)
        return -1;
    *out = (int32_t)d;
    return 0;
}

/* Append "a, b, c" (truncated with "...") to buf. */
static void list_columns(const csv_cols *c, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < c->ncols && used + 1 < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", c->names[i]);
        if (w < 0 || (size_t)w >= cap - used || used > 120) {
            snprintf(buf + (used < cap - 5 ? used : cap - 5), 5, "...");
            return;
        }
        used += (size_t)w;
    }
}

/* Resolve a column to an index, with the spec's JSON path in errors. */
static mt_code find_column(const mt_data_spec *s, const csv_cols *c, const mt_data_column *col,
                           const char *field, const char *fname, size_t *out, mt_err *err)
{
    if (col->name == NULL) {
        if ((size_t)col->index >= c->ncols)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s.%s: column %ld out of range in %s (%zu columns)",
                              mt_data__spec_path(s), field, col->index, fname, c->ncols);
        *out = (size_t)col->index;
        return MT_OK;
    }
    if (c->names == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s.%s: column '%s' is named but %s has no header (\"header\": false)",
                          mt_data__spec_path(s), field, col->name, fname);
    for (size_t i = 0; i < c->ncols; i++) {
        if (strcmp(c->names[i], col->name) == 0) {
            *out = i;
            return MT_OK;
        }
    }
    char cols[160];
    list_columns(c, cols, sizeof(cols));
    return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: no column '%s' in %s (columns: %s)",
                      mt_data__spec_path(s), field, col->name, fname, cols);
}

/* Build c->slot from the spec once c->ncols and c->names are known. */
static mt_code resolve_columns(const mt_data_spec *s, csv_cols *c, const char *fname, mt_err *err)
{
    mt_code rc;

    c->slot = mt_malloc(c->ncols * sizeof(*c->slot));
    if (c->slot == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
    if (s->label_column_set) {
        rc = find_column(s, c, &s->label_column, "label_column", fname, &c->label, err);
        if (rc != MT_OK)
            return rc;
    } else {
        c->label = c->ncols - 1;
    }
    if (c->ncols < 2)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu column(s); need at least one feature and a label", fname,
                          c->ncols);
    for (size_t i = 0; i < c->ncols; i++)
        c->slot[i] = s->feature_cols == NULL ? (int)i - (i > c->label) : COL_SKIP;
    if (s->feature_cols == NULL) {
        c->nfeat = c->ncols - 1;
    } else {
        for (size_t k = 0; k < s->n_feature_cols; k++) {
            char field[48];
            size_t idx;
            snprintf(field, sizeof(field), "feature_columns[%zu]", k);
            rc = find_column(s, c, &s->feature_cols[k], field, fname, &idx, err);
            if (rc != MT_OK)
                return rc;
            if (idx == c->label || c->slot[idx] != COL_SKIP)
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: column %zu %s",
                                  mt_data__spec_path(s), field, idx,
                                  idx == c->label ? "is the label column" : "is listed twice");
            c->slot[idx] = (int)k;
        }
        c->nfeat = s->n_feature_cols;
    }
    c->slot[c->label] = COL_LABEL;
    if (s->shape[0] != 0 && s->shape[0] * s->shape[1] * s->shape[2] != c->nfeat)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s.shape: %zux%zux%zu = %zu values but %s has %zu feature columns",
                          mt_data__spec_path(s), s->shape[0], s->shape[1], s->shape[2],
                          s->shape[0] * s->shape[1] * s->shape[2], fname, c->nfeat);
    return MT_OK;
}

/* Set up columns from the first line (header or first record). */
static mt_code init_columns(const mt_data_spec *s, const char *line, size_t len, const char *fname,
                            size_t lineno, csv_cols *c, mt_err *err)
{
    c->ncols = count_fields(line, len, s->delimiter);
    if (s->header) {
        const char *p = line;
        c->names = mt_calloc(c->ncols, sizeof(*c->names));
        if (c->names == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
        for (size_t i = 0; i < c->ncols; i++) {
            const char *q = memchr(p, s->delimiter, (size_t)(line + len - p));
            const char *f = p;
            size_t fl = trim(&f, (size_t)((q != NULL ? q : line + len) - p));
            c->names[i] = mt_malloc(fl + 1);
            if (c->names[i] == NULL)
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
            memcpy(c->names[i], f, fl);
            c->names[i][fl] = '\0';
            if (fl == 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: header column %zu is empty",
                                  fname, lineno, i);
            p = q != NULL ? q + 1 : line + len;
        }
    }
    return resolve_columns(s, c, fname, err);
}

mt_code mt_data__csv_check(const mt_data_spec *s, const char *path, mt_err *err)
{
    FILE *fp;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t r;
    csv_cols c;
    mt_code rc;

    memset(&c, 0, sizeof(c));
    rc = mt_data__fopen(path, &fp, err);
    if (rc != MT_OK)
        return rc;
    while ((r = getline(&line, &cap, fp)) >= 0) {
        size_t len = chomp(line, (size_t)r);
        lineno++;
        if (len == 0)
            continue;
        rc = init_columns(s, line, len, path, lineno, &c, err);
        goto out;
    }
    rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: empty file", path);
out:
    cols_fini(&c);
    free(line);
    fclose(fp);
    return rc;
}

/* Grow the block to hold `need` examples. */
static mt_code block_reserve(mt_data_block *b, size_t *cap, size_t need, const char *fname,
                             mt_err *err)
{
    size_t nc = *cap ? *cap : 256;
    float *x;
    int32_t *y;

    if (need <= *cap)
        return MT_OK;
    while (nc < need)
        nc *= 2;
    x = mt_realloc(b->x, nc * b->dim * sizeof(float) + 1);
    if (x == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
    b->x = x;
    y = mt_realloc(b->y, nc * sizeof(int32_t));
    if (y == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
    b->y = y;
    *cap = nc;
    return MT_OK;
}

/* Parse one record into row `row` of b. */
static mt_code parse_record(const mt_data_spec *s, const csv_cols *c, const char *line, size_t len,
                            const char *fname, size_t lineno, mt_data_block *b, mt_err *err)
{
    float *x = b->x + b->n * b->dim;
    const char *p = line, *end = line + len;
    size_t col = 0;

    if (count_fields(line, len, s->delimiter) != c->ncols)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: %zu fields, expected %zu", fname,
                          lineno, count_fields(line, len, s->delimiter), c->ncols);
    for (col = 0; col < c->ncols; col++) {
        const char *q = memchr(p, s->delimiter, (size_t)(end - p));
        size_t fl = (size_t)((q != NULL ? q : end) - p);
        int slot = c->slot[col];
        if (slot >= 0) {
            if (parse_float(p, fl, &x[slot]) != 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "%s:%zu: column %zu%s%s%s: '%.*s' is not a finite number", fname,
                                  lineno, col, c->names ? " ('" : "", c->names ? c->names[col] : "",
                                  c->names ? "')" : "", (int)(fl > 40 ? 40 : fl), p);
            x[slot] *= s->scale;
        } else if (slot == COL_LABEL) {
            int32_t y;
            if (parse_label(p, fl, &y) != 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "%s:%zu: label (column %zu): '%.*s' is not an integer", fname,
                                  lineno, col, (int)(fl > 40 ? 40 : fl), p);
            if (y < 0 || (s->num_classes > 0 && y >= s->num_classes))
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: label %d outside [0, %d)",
                                  fname, lineno, (int)y,
                                  s->num_classes > 0 ? s->num_classes : INT32_MAX);
            b->y[b->n] = y;
        }
        p = q != NULL ? q + 1 : end;
    }
    b->n++;
    return MT_OK;
}

mt_code mt_data__csv_read(const mt_data_spec *s, FILE *fp, const char *name, mt_data_block *out,
                          mt_err *err)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0, bcap = 0;
    ssize_t r;
    csv_cols c;
    mt_code rc = MT_OK;
    bool have_cols = false;

    memset(out, 0, sizeof(*out));
    memset(&c, 0, sizeof(c));
    while ((r = getline(&line, &cap, fp)) >= 0) {
        size_t len = chomp(line, (size_t)r);
        lineno++;
        if (len == 0)
            continue;
        if (!have_cols) {
            rc = init_columns(s, line, len, name, lineno, &c, err);
            if (rc != MT_OK)
                goto fail;
            have_cols = true;
            out->dim = c.nfeat;
            if (s->header)
                continue;
        }
        rc = block_reserve(out, &bcap, out->n + 1, name, err);
        if (rc == MT_OK)
            rc = parse_record(s, &c, line, len, name, lineno, out, err);
        if (rc != MT_OK)
            goto fail;
    }
    if (ferror(fp)) {
        rc = mt_err_set(err, MT_DATA_LOSS, "read %s: I/O error", name);
        goto fail;
    }
    if (out->n == 0) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no records", name);
        goto fail;
    }
    if (s->shape[0] != 0)
        memcpy(out->shape, s->shape, sizeof(out->shape));
    cols_fini(&c);
    free(line);
    return MT_OK;
fail:
    cols_fini(&c);
    free(line);
    mt_data_block_fini(out);
    return rc;
}

/* Records = lines holding something other than '\r', minus the header. */
mt_code mt_data__count_records(const char *path, bool header, size_t *n, mt_err *err)
{
    char buf[1 << 16];
    size_t got, lines = 0;
    bool content = false;
    FILE *fp;
    mt_code rc = mt_data__fopen(path, &fp, err);

    *n = 0;
    if (rc != MT_OK)
        return rc;
    while ((got = fread(buf, 1, sizeof(buf), fp)) > 0) {
        for (size_t i = 0; i < got; i++) {
            char ch = buf[i];
            if (ch == '\n') {
                lines += content;
                content = false;
            } else if (ch != '\r') {
                content = true;
            }
        }
    }
    lines += content;
    if (ferror(fp)) {
        fclose(fp);
        return mt_err_set(err, MT_DATA_LOSS, "read %s: I/O error", path);
    }
    fclose(fp);
    if (header && lines > 0)
        lines--;
    *n = lines;
    return MT_OK;
}

static mt_code csv_count(const mt_data_spec *s, const mt_data_file *f, size_t *n, mt_err *err)
{
    mt_code rc = mt_data__count_records(f->path, s->header, n, err);
    if (rc == MT_OK && *n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no records", f->path);
    return rc;
}

static mt_code csv_load(const mt_data_spec *s, const mt_data_file *f, const mt_data_tfidf *vec,
                        mt_data_block *out, mt_err *err)
{
    FILE *fp;
    mt_code rc;

    (void)vec;
    memset(out, 0, sizeof(*out));
    rc = mt_data__fopen(f->path, &fp, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_data__csv_read(s, fp, f->path, out, err);
    fclose(fp);
    return rc;
}

const mt_data__source mt_data__csv_source = {"csv", csv_count, csv_load, NULL};
