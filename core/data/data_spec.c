/* SPDX-License-Identifier: MIT */
/*
 * data_spec.c — parse the `dataset` section of a job spec (contract in mt_data.h).
 *
 * Called by the job-spec parser of the training engine, `meshtrain plan` and the worker; calls
 * cJSON, glob(3) and the CSV header check. Every message starts with the JSON path of the field
 * at fault (`dataset.train.files[1]: no file matches 'x*.csv'`). Unknown fields are refused so
 * typos do not silently fall back to defaults.
 * Threading: no shared state. Tests: tests/unit/test_data_spec.c.
 */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

static const char *const policy_names[] = {"auto", "file", "data", "off"};

const char *mt_data_shard_policy_name(mt_data_shard_policy p)
{
    return (unsigned)p < 4 ? policy_names[p] : "?";
}

mt_code mt_data_shard_policy_parse(const char *s, mt_data_shard_policy *out)
{
    for (int i = 0; s != NULL && i < 4; i++) {
        if (strcmp(s, policy_names[i]) == 0) {
            *out = (mt_data_shard_policy)i;
            return MT_OK;
        }
    }
    return MT_INVALID_ARGUMENT;
}

const char *mt_data__spec_path(const mt_data_spec *spec)
{
    return spec != NULL && spec->json_path != NULL ? spec->json_path : "dataset";
}

mt_code mt_data__fopen(const char *path, FILE **out, mt_err *err)
{
    struct stat st;
    FILE *fp;

    *out = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "open %s: is a directory", path);
    fp = fopen(path, "rb");
    if (fp == NULL) {
        int e = errno;
        mt_code c = e == ENOENT    ? MT_NOT_FOUND
                    : e == EACCES  ? MT_PERMISSION_DENIED
                    : e == ENOMEM  ? MT_RESOURCE_EXHAUSTED
                    : e == ENOTDIR ? MT_NOT_FOUND
                                   : MT_INTERNAL;
        return mt_err_set(err, c, "open %s: %s", path, strerror(e));
    }
    *out = fp;
    return MT_OK;
}

static void file_list_fini(mt_data_file_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        mt_free(l->files[i].path);
        mt_free(l->files[i].labels_path);
    }
    mt_free(l->files);
    l->files = NULL;
    l->n = 0;
}

void mt_data_spec_free(mt_data_spec *spec)
{
    if (spec == NULL)
        return;
    file_list_fini(&spec->train);
    file_list_fini(&spec->test);
    mt_free(spec->label_column.name);
    for (size_t i = 0; i < spec->n_feature_cols; i++)
        mt_free(spec->feature_cols[i].name);
    mt_free(spec->feature_cols);
    mt_free(spec->json_path);
    mt_free(spec);
}

/* ------------------------------------------------------------------ paths and globs */

typedef struct parse_ctx {
    const char *path;     /* "dataset" */
    const char *base_dir; /* may be NULL */
    mt_err *err;
} parse_ctx;

static mt_code oom(parse_ctx *c)
{
    return mt_err_set(c->err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
}

/* Resolve a relative path against base_dir; returns owned or NULL (OOM). */
static char *resolve_path(const parse_ctx *c, const char *p)
{
    size_t n;
    char *s;

    if (p[0] == '/' || c->base_dir == NULL || c->base_dir[0] == '\0')
        return mt_strdup(p);
    n = strlen(c->base_dir) + strlen(p) + 2;
    s = mt_malloc(n);
    if (s != NULL)
        snprintf(s, n, "%s/%s", c->base_dir, p);
    return s;
}

static mt_code list_push(parse_ctx *c, mt_data_file_list *l, char *path, char *labels)
{
    mt_data_file *nf = mt_realloc(l->files, (l->n + 1) * sizeof(*nf));
    if (nf == NULL) {
        mt_free(path);
        mt_free(labels);
        return oom(c);
    }
    l->files = nf;
    l->files[l->n].path = path;
    l->files[l->n].labels_path = labels;
    l->n++;
    return MT_OK;
}

/* Add one string entry; expands glob patterns (sorted by glob(3)). */
static mt_code add_path(parse_ctx *c, mt_data_file_list *l, const char *field, const char *p)
{
    char *full = resolve_path(c, p);
    mt_code rc = MT_OK;
    glob_t g;
    int gr;

    if (full == NULL)
        return oom(c);
    if (strpbrk(p, "*?[") == NULL)
        return list_push(c, l, full, NULL);
    memset(&g, 0, sizeof(g));
    gr = glob(full, GLOB_ERR, NULL, &g);
    if (gr == GLOB_NOMATCH || (gr == 0 && g.gl_pathc == 0)) {
        rc = mt_err_set(c->err, MT_NOT_FOUND, "%s.%s: no file matches '%s'", c->path, field, full);
    } else if (gr != 0) {
        rc = mt_err_set(c->err, gr == GLOB_NOSPACE ? MT_RESOURCE_EXHAUSTED : MT_PERMISSION_DENIED,
                        "%s.%s: cannot expand '%s'", c->path, field, full);
    } else {
        for (size_t i = 0; i < g.gl_pathc && rc == MT_OK; i++) {
            char *s = mt_strdup(g.gl_pathv[i]);
            rc = s == NULL ? oom(c) : list_push(c, l, s, NULL);
        }
    }
    globfree(&g);
    mt_free(full);
    return rc;
}

/* Append an (images, labels) pair, both resolved against base_dir. */
static mt_code push_pair(parse_ctx *c, mt_data_file_list *l, const char *images, const char *labels)
{
    char *a = resolve_path(c, images), *b = resolve_path(c, labels);
    if (a == NULL || b == NULL) {
        mt_free(a);
        mt_free(b);
        return oom(c);
    }
    return list_push(c, l, a, b);
}

static mt_code add_idx_pair(parse_ctx *c, mt_data_file_list *l, const char *field, const cJSON *o)
{
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(o, "images");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(o, "labels");

    if (!cJSON_IsString(im) || !cJSON_IsString(lb))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.%s: an IDX entry needs string fields \"images\" and \"labels\"",
                          c->path, field);
    return push_pair(c, l, im->valuestring, lb->valuestring);
}

/* An entry of a file list: a string (path or glob) or, for IDX, {images, labels}. */
static mt_code add_entry(parse_ctx *c, mt_data_format fmt, mt_data_file_list *l, const char *field,
                         const cJSON *e)
{
    if (fmt == MT_DATA_FORMAT_IDX) {
        if (!cJSON_IsObject(e))
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.%s: must be an object {\"images\": ..., \"labels\": ...}",
                              c->path, field);
        return add_idx_pair(c, l, field, e);
    }
    if (!cJSON_IsString(e) || e->valuestring[0] == '\0')
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be a non-empty path string",
                          c->path, field);
    return add_path(c, l, field, e->valuestring);
}

/* "train" / "test": "path" | ["p", ...] | {"files": [...]} | {"glob": "p"} | IDX pair. */
static mt_code parse_split(parse_ctx *c, mt_data_format fmt, const char *name, const cJSON *node,
                           mt_data_file_list *l)
{
    char field[96];
    const cJSON *arr = node, *e;
    mt_code rc;
    size_t i = 0;

    if (cJSON_IsObject(node)) {
        const cJSON *files = cJSON_GetObjectItemCaseSensitive(node, "files");
        const cJSON *gl = cJSON_GetObjectItemCaseSensitive(node, "glob");
        if (fmt == MT_DATA_FORMAT_IDX && files == NULL)
            return add_idx_pair(c, l, name, node);
        if (files != NULL && gl != NULL)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.%s: give either \"files\" or \"glob\", not both", c->path, name);
        if (gl != NULL) {
            snprintf(field, sizeof(field), "%s.glob", name);
            if (!cJSON_IsString(gl))
                return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be a string", c->path,
                                  field);
            rc = add_path(c, l, field, gl->valuestring);
            goto done;
        }
        if (files == NULL)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.%s: needs \"files\" (a list) or \"glob\" (a pattern)", c->path,
                              name);
        arr = files;
        snprintf(field, sizeof(field), "%s.files", name);
    } else {
        snprintf(field, sizeof(field), "%s", name);
    }
    if (cJSON_IsString(arr)) {
        rc = add_entry(c, fmt, l, field, arr);
        goto done;
    }
    if (!cJSON_IsArray(arr))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.%s: must be a path, a list of paths, or {\"files\"|\"glob\": ...}",
                          c->path, field);
    cJSON_ArrayForEach(e, arr)
    {
        char ef[128];
        snprintf(ef, sizeof(ef), "%s[%zu]", field, i++);
        rc = add_entry(c, fmt, l, ef, e);
        if (rc != MT_OK)
            return rc;
    }
    rc = MT_OK;
done:
    if (rc == MT_OK && l->n == 0)
        rc = mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: no files", c->path, field);
    return rc;
}

/*
 * The flat IDX form of the training engine's job files: "<split>_images" + "<split>_labels".
 * Sets *found when either key is present.
 */
static mt_code parse_flat_idx(parse_ctx *c, const cJSON *node, const char *split,
                              mt_data_file_list *l, bool *found)
{
    char ki[32], kl[32];
    const cJSON *im, *lb;

    snprintf(ki, sizeof(ki), "%s_images", split);
    snprintf(kl, sizeof(kl), "%s_labels", split);
    im = cJSON_GetObjectItemCaseSensitive(node, ki);
    lb = cJSON_GetObjectItemCaseSensitive(node, kl);
    *found = im != NULL || lb != NULL;
    if (!*found)
        return MT_OK;
    if (cJSON_GetObjectItemCaseSensitive(node, split) != NULL)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: give either \"%s\" or \"%s\"",
                          c->path, im != NULL ? ki : kl, split, im != NULL ? ki : kl);
    if (!cJSON_IsString(im) || im->valuestring[0] == '\0')
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be a non-empty path string",
                          c->path, ki);
    if (!cJSON_IsString(lb) || lb->valuestring[0] == '\0')
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be a non-empty path string",
                          c->path, kl);
    return push_pair(c, l, im->valuestring, lb->valuestring);
}

/* The Fashion-MNIST IDX files of the Debian package dataset-fashion-mnist. */
#define FMNIST "/usr/share/datasets/fashion-mnist/"
static mt_code default_fashion_mnist(parse_ctx *c, mt_data_spec *s)
{
    static const char *const f[4] = {
        FMNIST "train-images-idx3-ubyte.gz", FMNIST "train-labels-idx1-ubyte.gz",
        FMNIST "t10k-images-idx3-ubyte.gz", FMNIST "t10k-labels-idx1-ubyte.gz"};
    mt_code rc = MT_OK;

    s->format = MT_DATA_FORMAT_IDX;
    s->num_classes = 10;
    for (int i = 0; i < 4 && rc == MT_OK; i += 2)
        rc = push_pair(c, i == 0 ? &s->train : &s->test, f[i], f[i + 1]);
    return rc;
}

/* ------------------------------------------------------------------ scalar fields */

static mt_code get_uint(parse_ctx *c, const cJSON *v, const char *name, size_t lo, size_t hi,
                        size_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be an integer in [%zu, %zu]",
                          c->path, name, lo, hi);
    *out = (size_t)v->valuedouble;
    return MT_OK;
}

static mt_code get_bool(parse_ctx *c, const cJSON *v, const char *name, bool *out)
{
    if (!cJSON_IsBool(v))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be true or false", c->path,
                          name);
    *out = cJSON_IsTrue(v);
    return MT_OK;
}

static mt_code get_column(parse_ctx *c, const cJSON *v, const char *name, mt_data_column *out)
{
    if (cJSON_IsString(v) && v->valuestring[0] != '\0') {
        out->name = mt_strdup(v->valuestring);
        return out->name == NULL ? oom(c) : MT_OK;
    }
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= 0 &&
        v->valuedouble < 1e9) {
        out->name = NULL;
        out->index = (long)v->valuedouble;
        return MT_OK;
    }
    return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                      "%s.%s: must be a column name or a 0-based column index", c->path, name);
}

static mt_code parse_field(parse_ctx *c, mt_data_spec *s, const cJSON *v)
{
    const char *k = v->string;
    size_t u = 0;
    mt_code rc;

    if (strcmp(k, "format") == 0 || strcmp(k, "train") == 0 || strcmp(k, "test") == 0)
        return MT_OK; /* handled first */
    if (s->format == MT_DATA_FORMAT_IDX &&
        (strcmp(k, "train_images") == 0 || strcmp(k, "train_labels") == 0 ||
         strcmp(k, "test_images") == 0 || strcmp(k, "test_labels") == 0))
        return MT_OK; /* the training engine's flat IDX form, handled with the splits */
    if (strcmp(k, "label_column") == 0) {
        s->label_column_set = true;
        return get_column(c, v, k, &s->label_column);
    }
    if (strcmp(k, "feature_columns") == 0) {
        size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
        const cJSON *e;
        if (!cJSON_IsArray(v) || n == 0)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.feature_columns: must be a non-empty list of names or indices",
                              c->path);
        s->feature_cols = mt_calloc(n, sizeof(*s->feature_cols));
        if (s->feature_cols == NULL)
            return oom(c);
        cJSON_ArrayForEach(e, v)
        {
            char f[64];
            snprintf(f, sizeof(f), "feature_columns[%zu]", i);
            rc = get_column(c, e, f, &s->feature_cols[i]);
            if (rc != MT_OK)
                return rc;
            s->n_feature_cols = ++i;
        }
        return MT_OK;
    }
    if (strcmp(k, "header") == 0)
        return get_bool(c, v, k, &s->header);
    if (strcmp(k, "drop_remainder") == 0)
        return get_bool(c, v, k, &s->drop_remainder);
    if (strcmp(k, "delimiter") == 0) {
        if (!cJSON_IsString(v) || strlen(v->valuestring) != 1 || v->valuestring[0] == '\n' ||
            v->valuestring[0] == '\r' || v->valuestring[0] == '"' || v->valuestring[0] == '.' ||
            v->valuestring[0] == '-')
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.delimiter: must be a one-character string such as \",\" or "
                              "\"\\t\"",
                              c->path);
        s->delimiter = v->valuestring[0];
        return MT_OK;
    }
    if (strcmp(k, "scale") == 0) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
            return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.scale: must be a positive number",
                              c->path);
        s->scale = (float)v->valuedouble;
        return MT_OK;
    }
    if (strcmp(k, "shape") == 0) {
        int n = cJSON_GetArraySize(v);
        if (!cJSON_IsArray(v) || n < 2 || n > 3)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.shape: must be [height, width] or [height, width, channels]",
                              c->path);
        s->shape[2] = 1;
        for (int i = 0; i < n; i++) {
            char f[32];
            snprintf(f, sizeof(f), "shape[%d]", i);
            rc = get_uint(c, cJSON_GetArrayItem(v, i), f, 1, 1u << 20, &s->shape[i]);
            if (rc != MT_OK)
                return rc;
        }
        return MT_OK;
    }
    if (strcmp(k, "num_classes") == 0) {
        rc = get_uint(c, v, k, 0, INT_MAX, &u);
        if (rc == MT_OK)
            s->num_classes = (int)u;
        return rc;
    }
    if (strcmp(k, "max_tokens") == 0)
        return get_uint(c, v, k, 2, 1u << 22, &s->max_tokens);
    if (strcmp(k, "shuffle_buffer") == 0)
        return get_uint(c, v, k, 0, 1u << 30, &s->shuffle_buffer);
    if (strcmp(k, "prefetch") == 0)
        return get_uint(c, v, k, 0, 64, &s->prefetch);
    if (strcmp(k, "seed") == 0) {
        rc = get_uint(c, v, k, 0, (size_t)1 << 53, &u);
        s->seed = (uint64_t)u;
        s->seed_set = true;
        return rc;
    }
    if (strcmp(k, "shard_policy") == 0) {
        if (!cJSON_IsString(v) || mt_data_shard_policy_parse(v->valuestring, &s->shard) != MT_OK)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.shard_policy: must be \"auto\", \"file\", \"data\" or \"off\"",
                              c->path);
        return MT_OK;
    }
    if (strcmp(k, "batching") == 0) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "global") == 0)
            s->batching = MT_DATA_BATCH_GLOBAL;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "per_replica") == 0)
            s->batching = MT_DATA_BATCH_PER_REPLICA;
        else
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.batching: must be \"global\" or \"per_replica\"", c->path);
        return MT_OK;
    }
    return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: unknown field", c->path, k);
}

/* Format-specific checks after all fields are read. */
static mt_code check_spec(parse_ctx *c, mt_data_spec *s)
{
    bool csv = s->format == MT_DATA_FORMAT_CSV;
    mt_code rc;

    if (!csv && (s->label_column_set || s->feature_cols != NULL))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: only CSV datasets have columns",
                          c->path, s->label_column_set ? "label_column" : "feature_columns");
    if (!csv && s->shape[0] != 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.shape: only CSV datasets take a shape (IDX files carry theirs)",
                          c->path);
    if (!csv)
        return MT_OK;
    for (size_t i = 0; i < s->train.n; i++) {
        rc = mt_data__csv_check(s, s->train.files[i].path, c->err);
        if (rc != MT_OK)
            return rc;
    }
    for (size_t i = 0; i < s->test.n; i++) {
        rc = mt_data__csv_check(s, s->test.files[i].path, c->err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

mt_code mt_data_spec_parse(const cJSON *node, const char *json_path, const char *base_dir,
                           mt_data_spec **out, mt_err *err)
{
    parse_ctx c = {json_path != NULL ? json_path : "dataset", base_dir, err};
    const cJSON *fmt, *v;
    mt_data_spec *s;
    bool found_train = false, found_test = false;
    mt_code rc;

    *out = NULL;
    if (node != NULL && !cJSON_IsObject(node))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: must be an object", c.path);
    s = mt_calloc(1, sizeof(*s));
    if (s == NULL)
        return oom(&c);
    s->header = true;
    s->delimiter = ',';
    s->scale = 1.0f;
    s->max_tokens = 1200;
    s->prefetch = 2;
    s->json_path = mt_strdup(c.path);
    if (s->json_path == NULL) {
        rc = oom(&c);
        goto fail;
    }
    if (node == NULL) {
        rc = default_fashion_mnist(&c, s);
        if (rc != MT_OK)
            goto fail;
        *out = s;
        return MT_OK;
    }
    fmt = cJSON_GetObjectItemCaseSensitive(node, "format");
    if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "csv") == 0)
        s->format = MT_DATA_FORMAT_CSV;
    else if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "text") == 0)
        s->format = MT_DATA_FORMAT_TEXT;
    else if ((cJSON_IsString(fmt) && strcmp(fmt->valuestring, "idx") == 0) ||
             (fmt == NULL && (cJSON_GetObjectItemCaseSensitive(node, "train_images") != NULL ||
                              cJSON_GetObjectItemCaseSensitive(node, "train_labels") != NULL)))
        s->format = MT_DATA_FORMAT_IDX;
    else {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s.format: must be \"csv\", \"text\" or \"idx\"",
                        c.path);
        goto fail;
    }
    cJSON_ArrayForEach(v, node)
    {
        rc = parse_field(&c, s, v);
        if (rc != MT_OK)
            goto fail;
    }
    if (s->format == MT_DATA_FORMAT_IDX) {
        rc = parse_flat_idx(&c, node, "train", &s->train, &found_train);
        if (rc == MT_OK)
            rc = parse_flat_idx(&c, node, "test", &s->test, &found_test);
        if (rc != MT_OK)
            goto fail;
    }
    v = cJSON_GetObjectItemCaseSensitive(node, "train");
    if (v == NULL && !found_train) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s.train: missing (the training files)", c.path);
        goto fail;
    }
    if (v != NULL) {
        rc = parse_split(&c, s->format, "train", v, &s->train);
        if (rc != MT_OK)
            goto fail;
    }
    v = cJSON_GetObjectItemCaseSensitive(node, "test");
    if (v != NULL && !found_test) {
        rc = parse_split(&c, s->format, "test", v, &s->test);
        if (rc != MT_OK)
            goto fail;
    }
    rc = check_spec(&c, s);
    if (rc != MT_OK)
        goto fail;
    *out = s;
    return MT_OK;
fail:
    mt_data_spec_free(s);
    return rc;
}
