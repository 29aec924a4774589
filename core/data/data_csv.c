/* SPDX-License-Identifier: MIT */
/*
 * data_csv.c — CSV source: numeric feature columns plus a label: an integer class id, a class
 * name (string labels) or one or more float targets (regression).
 *
 * Called through mt_data__csv_source by the dataset layer, by the spec parser for the header
 * check, by the class fitting (distinct label names) and by `meshtrain predict` (features by
 * column name). Format: one record per line ('\n', an optional trailing '\r'), fields separated
 * by the spec's delimiter, no quoting; lines holding nothing (or only '\r') are skipped; with
 * "header": true the first such line names the columns. Every record must have the header's (or
 * the first record's) number of fields; every feature must be a finite number or, with
 * "missing": "fill", a missing value (empty, NA, N/A, NaN, nan, null, ?) that becomes
 * fill_value; the label must be an integer (in [0, num_classes) when set), one of the class
 * names, or finite numbers for float targets — a missing label is always refused. Any violation
 * fails the whole file with FILE:LINE. Integers (the common pixel case) take a fast exact path;
 * other numbers go through strtof.
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

/* Column roles, resolved once per file from the header (or the first record): a feature
 * position (>= 0), skipped, the class label, or float target k (COL_TARGET0 - k). */
enum { COL_SKIP = -1, COL_LABEL = -2, COL_TARGET0 = -3, COL_DROP = -1000000 };
/* COL_DROP: a label column present in a prediction input (neither a feature nor read) */

/* What the columns are resolved for. */
typedef enum cols_mode {
    COLS_TRAIN,    /* features and the label (as the spec says) */
    COLS_FEATURES, /* prediction: features only, the label column may be absent */
} cols_mode;

typedef struct csv_cols {
    size_t ncols;   /* fields per record */
    char **names;   /* owned; ncols names, or NULL without a header */
    int *slot;      /* owned; per column: COL_SKIP, COL_LABEL, a target or the feature position */
    size_t nfeat;   /* features per example */
    size_t label;   /* label column (the first target for float labels) */
    size_t ntgt;    /* float targets per example (0 for class labels) */
    bool has_label; /* a label column is read */
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

/* Mark the label column(s) in c->slot (all COL_SKIP before). */
static mt_code mark_labels(const mt_data_spec *s, csv_cols *c, const char *fname, cols_mode mode,
                           mt_err *err)
{
    mt_code rc;

    c->has_label = true;
    if (s->target_cols != NULL) {
        for (size_t k = 0; k < s->n_target_cols; k++) {
            char field[48];
            size_t idx;
            snprintf(field, sizeof(field), "label_column[%zu]", k);
            rc = find_column(s, c, &s->target_cols[k], field, fname, &idx, err);
            if (rc != MT_OK && mode == COLS_FEATURES)
                continue; /* a prediction input without this target */
            if (rc != MT_OK)
                return rc;
            if (c->slot[idx] != COL_SKIP)
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: column %zu is listed twice",
                                  mt_data__spec_path(s), field, idx);
            c->slot[idx] = mode == COLS_FEATURES ? COL_DROP : COL_TARGET0 - (int)k;
            if (k == 0)
                c->label = idx;
        }
        c->ntgt = mode == COLS_FEATURES ? 0 : s->n_target_cols;
        return MT_OK;
    }
    if (s->label_column_set) {
        rc = find_column(s, c, &s->label_column, "label_column", fname, &c->label, err);
        if (rc != MT_OK && mode == COLS_FEATURES) { /* a prediction input without the label */
            c->has_label = false;
            return MT_OK;
        }
        if (rc != MT_OK)
            return rc;
    } else if (mode == COLS_FEATURES) {
        c->has_label = false; /* the default label (the last column) is not assumed */
        return MT_OK;
    } else {
        c->label = c->ncols - 1;
    }
    c->slot[c->label] = mode == COLS_FEATURES                  ? COL_DROP
                        : s->label_type == MT_DATA_LABEL_FLOAT ? COL_TARGET0
                                                               : COL_LABEL;
    c->ntgt = s->label_type == MT_DATA_LABEL_FLOAT && mode == COLS_TRAIN ? 1 : 0;
    return MT_OK;
}

/* Build c->slot from the spec once c->ncols and c->names are known. */
static mt_code resolve_columns(const mt_data_spec *s, csv_cols *c, const char *fname,
                               cols_mode mode, mt_err *err)
{
    mt_code rc;

    c->slot = mt_malloc(c->ncols * sizeof(*c->slot));
    if (c->slot == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
    for (size_t i = 0; i < c->ncols; i++)
        c->slot[i] = COL_SKIP;
    rc = mark_labels(s, c, fname, mode, err);
    if (rc != MT_OK)
        return rc;
    if (c->ncols < 2 && mode == COLS_TRAIN)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu column(s); need at least one feature and a label", fname,
                          c->ncols);
    if (s->feature_cols == NULL) {
        for (size_t i = 0; i < c->ncols; i++)
            if (c->slot[i] == COL_SKIP)
                c->slot[i] = (int)c->nfeat++;
        if (c->nfeat == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no feature columns", fname);
    } else {
        for (size_t k = 0; k < s->n_feature_cols; k++) {
            char field[48];
            size_t idx;
            snprintf(field, sizeof(field), "feature_columns[%zu]", k);
            rc = find_column(s, c, &s->feature_cols[k], field, fname, &idx, err);
            if (rc != MT_OK)
                return rc;
            if (c->slot[idx] != COL_SKIP)
                return mt_err_set(
                    err, MT_INVALID_ARGUMENT, "%s.%s: column %zu %s", mt_data__spec_path(s), field,
                    idx, c->slot[idx] <= COL_LABEL ? "is the label column" : "is listed twice");
            c->slot[idx] = (int)k;
        }
        c->nfeat = s->n_feature_cols;
    }
    if (s->shape[0] != 0 && s->shape[0] * s->shape[1] * s->shape[2] != c->nfeat)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s.shape: %zux%zux%zu = %zu values but %s has %zu feature columns",
                          mt_data__spec_path(s), s->shape[0], s->shape[1], s->shape[2],
                          s->shape[0] * s->shape[1] * s->shape[2], fname, c->nfeat);
    return MT_OK;
}

/* Set up columns from the first line (header or first record). */
static mt_code init_columns(const mt_data_spec *s, const char *line, size_t len, const char *fname,
                            size_t lineno, cols_mode mode, csv_cols *c, mt_err *err)
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
    return resolve_columns(s, c, fname, mode, err);
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
        rc = init_columns(s, line, len, path, lineno, COLS_TRAIN, &c, err);
        goto out;
    }
    rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: empty file", path);
out:
    cols_fini(&c);
    free(line);
    fclose(fp);
    return rc;
}

/* Grow the block to hold `need` examples (b->dim and b->t_dim set). */
static mt_code block_reserve(mt_data_block *b, size_t *cap, size_t need, const char *fname,
                             mt_err *err)
{
    size_t nc = *cap ? *cap : 256;
    float *x, *t;
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
    if (b->t_dim > 0) {
        t = mt_realloc(b->t, nc * b->t_dim * sizeof(float));
        if (t == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", fname);
        b->t = t;
    }
    *cap = nc;
    return MT_OK;
}

/* Whether a field holds a missing value: empty, NA, N/A, NaN, nan, null or ?. */
static bool is_missing(const char *p, size_t n)
{
    static const char *const marks[] = {"NA", "N/A", "NaN", "nan", "null", "?"};

    n = trim(&p, n);
    if (n == 0)
        return true;
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
        if (strlen(marks[i]) == n && memcmp(marks[i], p, n) == 0)
            return true;
    return false;
}

/* " ('name')" for messages, or "" without a header. */
static const char *col_name(const csv_cols *c, size_t col, char *buf, size_t cap)
{
    if (c->names == NULL)
        return "";
    snprintf(buf, cap, " ('%s')", c->names[col]);
    return buf;
}

/* What a record parser needs besides the record. */
typedef struct rec_ctx {
    const mt_data_spec *s;
    const csv_cols *c;
    const mt_data_classes *classes; /* string labels */
    const char *fname;
    size_t lineno;
} rec_ctx;

/* Parse the class label field of a record into *y. */
static mt_code parse_class(const rec_ctx *r, const char *p, size_t fl, size_t col, int32_t *y,
                           mt_err *err)
{
    const mt_data_spec *s = r->s;

    if (is_missing(p, fl) && s->label_type != MT_DATA_LABEL_STRING)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: label (column %zu) is missing",
                          r->fname, r->lineno, col);
    if (s->label_type == MT_DATA_LABEL_STRING) {
        const char *q = p;
        size_t n = trim(&q, fl);
        *y = r->classes != NULL ? mt_data__class_id(s, r->classes, q, n) : -1;
        if (n == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: label (column %zu) is missing",
                              r->fname, r->lineno, col);
        if (memchr(q, '\0', n) != NULL)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s:%zu: label (column %zu) holds a NUL byte", r->fname, r->lineno,
                              col);
        if (*y < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s:%zu: label '%.*s' is not one of the %zu class_names", r->fname,
                              r->lineno, (int)(n > 40 ? 40 : n), q,
                              r->classes != NULL ? r->classes->n : 0);
        return MT_OK;
    }
    if (parse_label(p, fl, y) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s:%zu: label (column %zu): '%.*s' is not an integer%s", r->fname,
                          r->lineno, col, (int)(fl > 40 ? 40 : fl), p,
                          " (class names need \"label_type\": \"string\")");
    if (*y < 0 || (s->num_classes > 0 && *y >= s->num_classes))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: label %d outside [0, %d)", r->fname,
                          r->lineno, (int)*y, s->num_classes > 0 ? s->num_classes : INT32_MAX);
    return MT_OK;
}

/* Parse one feature or float target field into *v. */
static mt_code parse_value(const rec_ctx *r, const char *p, size_t fl, size_t col, bool target,
                           float *v, mt_err *err)
{
    char nm[80];

    if (parse_float(p, fl, v) == 0)
        return MT_OK;
    if (!target && r->s->missing == MT_DATA_MISSING_FILL && is_missing(p, fl)) {
        *v = r->s->fill_value;
        return MT_OK;
    }
    if (is_missing(p, fl))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: %s column %zu%s is missing%s",
                          r->fname, r->lineno, target ? "target" : "feature", col,
                          col_name(r->c, col, nm, sizeof(nm)),
                          target ? "" : " (\"missing\": \"fill\" replaces it with fill_value)");
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "%s:%zu: column %zu%s: '%.*s' is not a finite number", r->fname, r->lineno,
                      col, col_name(r->c, col, nm, sizeof(nm)), (int)(fl > 40 ? 40 : fl), p);
}

/* Parse one record into row b->n of b. */
static mt_code parse_record(const rec_ctx *r, const char *line, size_t len, mt_data_block *b,
                            mt_err *err)
{
    const mt_data_spec *s = r->s;
    const csv_cols *c = r->c;
    float *x = b->x + b->n * b->dim;
    const char *p = line, *end = line + len;
    mt_code rc;

    if (count_fields(line, len, s->delimiter) != c->ncols)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: %zu fields, expected %zu", r->fname,
                          r->lineno, count_fields(line, len, s->delimiter), c->ncols);
    b->y[b->n] = 0;
    for (size_t col = 0; col < c->ncols; col++) {
        const char *q = memchr(p, s->delimiter, (size_t)(end - p));
        size_t fl = (size_t)((q != NULL ? q : end) - p);
        int slot = c->slot[col];
        rc = MT_OK;
        if (slot >= 0) {
            rc = parse_value(r, p, fl, col, false, &x[slot], err);
            x[slot] *= s->scale;
        } else if (slot == COL_LABEL) {
            rc = parse_class(r, p, fl, col, &b->y[b->n], err);
        } else if (slot <= COL_TARGET0 && slot != COL_DROP) {
            rc = parse_value(r, p, fl, col, true,
                             &b->t[b->n * b->t_dim + (size_t)(COL_TARGET0 - slot)], err);
        }
        if (rc != MT_OK)
            return rc;
        p = q != NULL ? q + 1 : end;
    }
    b->n++;
    return MT_OK;
}

/* Decode a stream with columns resolved for `mode`. */
static mt_code csv_read_mode(const mt_data_spec *s, FILE *fp, const char *name,
                             const mt_data_classes *classes, cols_mode mode, mt_data_block *out,
                             mt_err *err)
{
    char *line = NULL;
    size_t cap = 0, bcap = 0;
    ssize_t r;
    csv_cols c;
    rec_ctx rx = {s, &c, classes, name, 0};
    mt_code rc = MT_OK;
    bool have_cols = false;

    memset(out, 0, sizeof(*out));
    memset(&c, 0, sizeof(c));
    while ((r = getline(&line, &cap, fp)) >= 0) {
        size_t len = chomp(line, (size_t)r);
        rx.lineno++;
        if (len == 0)
            continue;
        if (!have_cols) {
            rc = init_columns(s, line, len, name, rx.lineno, mode, &c, err);
            if (rc != MT_OK)
                goto fail;
            have_cols = true;
            out->dim = c.nfeat;
            out->y_dim = 1;
            out->t_dim = c.ntgt;
            if (s->header)
                continue;
        }
        rc = block_reserve(out, &bcap, out->n + 1, name, err);
        if (rc == MT_OK)
            rc = parse_record(&rx, line, len, out, err);
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

mt_code mt_data__csv_read(const mt_data_spec *s, FILE *fp, const char *name,
                          const mt_data_classes *classes, mt_data_block *out, mt_err *err)
{
    return csv_read_mode(s, fp, name, classes, COLS_TRAIN, out, err);
}

mt_code mt_data_csv_read_features(const mt_data_spec *spec, const char *path, float **x, size_t *n,
                                  size_t *dim, mt_err *err)
{
    mt_data_spec s = *spec;
    mt_data_block b;
    FILE *fp;
    mt_code rc;

    *x = NULL;
    *n = *dim = 0;
    s.header = true;
    rc = mt_data__fopen(path, &fp, err);
    if (rc != MT_OK)
        return rc;
    rc = csv_read_mode(&s, fp, path, NULL, COLS_FEATURES, &b, err);
    fclose(fp);
    if (rc != MT_OK)
        return rc;
    *x = b.x;
    *n = b.n;
    *dim = b.dim;
    b.x = NULL;
    mt_data_block_fini(&b);
    return MT_OK;
}

mt_code mt_data__csv_label_names(const mt_data_spec *s, const char *path, mt_data_classes *out,
                                 mt_err *err)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t r;
    csv_cols c;
    FILE *fp;
    mt_code rc = mt_data__fopen(path, &fp, err);
    bool have_cols = false;

    if (rc != MT_OK)
        return rc;
    memset(&c, 0, sizeof(c));
    while (rc == MT_OK && (r = getline(&line, &cap, fp)) >= 0) {
        size_t len = chomp(line, (size_t)r), col = 0;
        const char *p = line, *end;
        lineno++;
        if (len == 0)
            continue;
        end = line + len;
        if (!have_cols) {
            rc = init_columns(s, line, len, path, lineno, COLS_TRAIN, &c, err);
            have_cols = true;
            if (rc != MT_OK || s->header)
                continue;
        }
        if (count_fields(line, len, s->delimiter) != c.ncols) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: %zu fields, expected %zu", path,
                            lineno, count_fields(line, len, s->delimiter), c.ncols);
            break;
        }
        for (; col < c.label; col++)
            p = (const char *)memchr(p, s->delimiter, (size_t)(end - p)) + 1;
        {
            const char *q = memchr(p, s->delimiter, (size_t)(end - p));
            size_t n = trim(&p, (size_t)((q != NULL ? q : end) - p));
            if (n == 0)
                rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: label (column %zu) is missing",
                                path, lineno, c.label);
            else if (memchr(p, '\0', n) != NULL)
                rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                                "%s:%zu: label (column %zu) holds a NUL byte", path, lineno,
                                c.label);
            else if (mt_data__classes_add(out, p, n) != MT_OK)
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        }
    }
    if (rc == MT_OK && ferror(fp))
        rc = mt_err_set(err, MT_DATA_LOSS, "read %s: I/O error", path);
    cols_fini(&c);
    free(line);
    fclose(fp);
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

static mt_code csv_count(const mt_data_spec *s, const mt_data_file *f, const mt_data__fit *fit,
                         size_t *n, mt_err *err)
{
    (void)fit;
    mt_code rc = mt_data__count_records(f->path, s->header, n, err);
    if (rc == MT_OK && *n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no records", f->path);
    return rc;
}

static mt_code csv_load(const mt_data_spec *s, const mt_data_file *f, const mt_data__fit *fit,
                        mt_data_block *out, mt_err *err)
{
    FILE *fp;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    rc = mt_data__fopen(f->path, &fp, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_data__csv_read(s, fp, f->path, fit->classes, out, err);
    fclose(fp);
    return rc;
}

const mt_data__source mt_data__csv_source = {"csv", csv_count, csv_load, NULL};
