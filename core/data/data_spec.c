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
#include <strings.h>
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
    /* a FIFO or a device would block the open or never end (and every file is read twice) */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "open %s: not a regular file", path);
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
    for (size_t i = 0; i < spec->n_target_cols; i++)
        mt_free(spec->target_cols[i].name);
    mt_free(spec->target_cols);
    for (size_t i = 0; i < spec->n_class_names; i++)
        mt_free(spec->class_names[i]);
    mt_free(spec->class_names);
    mt_free(spec->x_key);
    mt_free(spec->y_key);
    mt_free(spec->json_path);
    mt_free(spec);
}

/* ------------------------------------------------------------------ paths and globs */

typedef struct parse_ctx {
    const char *path;     /* "dataset" */
    const char *base_dir; /* may be NULL */
    mt_err *err;
    bool scale_set;      /* "scale" was given (IMAGES default it to 1/255 otherwise) */
    bool tokenizer_set;  /* "tokenizer" was given */
    bool vocab_size_set; /* "tokenizer.vocab_size" was given */
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

/* An NPY pair {"x": "x.npy", "y": "y.npy"}. */
static mt_code add_npy_pair(parse_ctx *c, mt_data_file_list *l, const char *field, const cJSON *o)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "x");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(o, "y");

    if (!cJSON_IsString(x) || !cJSON_IsString(y) || x->valuestring[0] == '\0' ||
        y->valuestring[0] == '\0' || cJSON_GetArraySize(o) != 2)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.%s: an NPY pair is {\"x\": \"x.npy\", \"y\": \"y.npy\"}", c->path,
                          field);
    return push_pair(c, l, x->valuestring, y->valuestring);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* An entry of a file list: a string (path or glob) or, for IDX, {images, labels}. */
static mt_code add_entry(parse_ctx *c, mt_data_format fmt, mt_data_file_list *l, const char *field,
                         const cJSON *e)
{
    if (fmt == MT_DATA_FORMAT_NPY && cJSON_IsObject(e))
        return add_npy_pair(c, l, field, e);
    if (fmt == MT_DATA_FORMAT_NPY && cJSON_IsString(e) && ends_with(e->valuestring, ".npy"))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.%s: a .npy file holds one array; give the pair {\"x\": \"x.npy\", "
                          "\"y\": \"y.npy\"} or an .npz archive",
                          c->path, field);
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
        if (fmt == MT_DATA_FORMAT_NPY && files == NULL && gl == NULL)
            return add_npy_pair(c, l, name, node);
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

/* A non-empty list of distinct non-empty strings (class_names). */
static mt_code get_names(parse_ctx *c, const cJSON *v, const char *name, char ***out, size_t *n)
{
    size_t cnt = (size_t)cJSON_GetArraySize(v), i = 0;
    const cJSON *e;

    if (!cJSON_IsArray(v) || cnt == 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be a non-empty list of names",
                          c->path, name);
    *out = mt_calloc(cnt, sizeof(char *));
    if (*out == NULL)
        return oom(c);
    cJSON_ArrayForEach(e, v)
    {
        if (!cJSON_IsString(e) || e->valuestring[0] == '\0')
            return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s[%zu]: must be a non-empty string",
                              c->path, name, i);
        for (size_t k = 0; k < i; k++)
            if (strcmp((*out)[k], e->valuestring) == 0)
                return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s[%zu]: '%s' is listed twice",
                                  c->path, name, i, e->valuestring);
        (*out)[i] = mt_strdup(e->valuestring);
        if ((*out)[i] == NULL)
            return oom(c);
        *n = ++i;
    }
    return MT_OK;
}

/* A number or a list of 1 or 3 numbers (per channel); positive when `positive`. */
static mt_code get_channel_values(parse_ctx *c, const cJSON *v, const char *name, bool positive,
                                  float out[3])
{
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    bool ok = cJSON_IsNumber(v) || (cJSON_IsArray(v) && (n == 1 || n == 3));

    for (int i = 0; ok && i < n; i++) {
        const cJSON *e = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, i) : v;
        ok = cJSON_IsNumber(e) && isfinite(e->valuedouble) && (!positive || e->valuedouble > 0);
        if (ok)
            out[i] = (float)e->valuedouble;
    }
    if (!ok)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.%s: must be a %snumber or a list of 1 or 3 (one per channel)",
                          c->path, name, positive ? "positive " : "");
    for (int i = n; i < 3; i++)
        out[i] = out[0];
    return MT_OK;
}

/* "augment": {"flip": "horizontal" | "vertical" | "horizontal_and_vertical" | "none",
 *             "crop_padding": P} */
static mt_code parse_augment(parse_ctx *c, mt_data_spec *s, const cJSON *v)
{
    static const char *const flips[] = {"none", "horizontal", "vertical",
                                        "horizontal_and_vertical"};
    const cJSON *e;

    if (!cJSON_IsObject(v))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.augment: must be an object {\"flip\": ..., \"crop_padding\": ...}",
                          c->path);
    cJSON_ArrayForEach(e, v)
    {
        if (strcmp(e->string, "flip") == 0) {
            int k = 0;
            while (k < 4 && !(cJSON_IsString(e) && strcmp(e->valuestring, flips[k]) == 0))
                k++;
            if (k == 4)
                return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                                  "%s.augment.flip: must be \"horizontal\", \"vertical\", "
                                  "\"horizontal_and_vertical\" or \"none\"",
                                  c->path);
            s->augment.flip = (mt_data_flip)k;
        } else if (strcmp(e->string, "crop_padding") == 0) {
            mt_code rc = get_uint(c, e, "augment.crop_padding", 0, 1024, &s->augment.crop_padding);
            if (rc != MT_OK)
                return rc;
        } else {
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.augment.%s: unknown field (flip, crop_padding)", c->path,
                              e->string);
        }
    }
    return MT_OK;
}

/* "label_column" as a list: several float target columns. */
static mt_code get_target_columns(parse_ctx *c, mt_data_spec *s, const cJSON *v)
{
    size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
    const cJSON *e;

    if (n == 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.label_column: must be a column or a non-empty list of columns",
                          c->path);
    s->target_cols = mt_calloc(n, sizeof(*s->target_cols));
    if (s->target_cols == NULL)
        return oom(c);
    cJSON_ArrayForEach(e, v)
    {
        char f[64];
        mt_code rc;
        snprintf(f, sizeof(f), "label_column[%zu]", i);
        rc = get_column(c, e, f, &s->target_cols[i]);
        if (rc != MT_OK)
            return rc;
        s->n_target_cols = ++i;
    }
    return MT_OK;
}

static mt_code get_string_key(parse_ctx *c, const cJSON *v, const char *name, char **out)
{
    if (!cJSON_IsString(v) || v->valuestring[0] == '\0')
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: must be a non-empty string", c->path,
                          name);
    mt_free(*out);
    *out = mt_strdup(v->valuestring);
    return *out == NULL ? oom(c) : MT_OK;
}

/* TOKENS: "tokenizer": {"type": "char" | "bpe", "vocab_size": N}. */
static mt_code parse_tokenizer(parse_ctx *c, mt_data_spec *s, const cJSON *v)
{
    const cJSON *e;

    if (!cJSON_IsObject(v))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.tokenizer: must be an object {\"type\": \"char\" or \"bpe\", "
                          "\"vocab_size\": N}",
                          c->path);
    c->tokenizer_set = true;
    cJSON_ArrayForEach(e, v)
    {
        if (strcmp(e->string, "type") == 0) {
            if (!cJSON_IsString(e) ||
                mt_text_tokenizer_type_parse(e->valuestring, &s->tokenizer) != MT_OK)
                return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                                  "%s.tokenizer.type: must be \"char\" or \"bpe\"", c->path);
        } else if (strcmp(e->string, "vocab_size") == 0) {
            mt_code rc =
                get_uint(c, e, "tokenizer.vocab_size", 0, MT_TEXT_MAX_VOCAB, &s->vocab_size);
            if (rc != MT_OK)
                return rc;
            c->vocab_size_set = true;
        } else {
            return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.tokenizer.%s: unknown field",
                              c->path, e->string);
        }
    }
    return MT_OK;
}

static mt_code not_for(parse_ctx *c, const char *field, const char *which);

/* TOKENS: block_size required; the tokenizer's vocab_size fits its type. Others: no such field. */
static mt_code check_tokens(parse_ctx *c, mt_data_spec *s)
{
    bool bpe = s->tokenizer == MT_TEXT_TOKENIZER_BPE;

    if (s->format != MT_DATA_FORMAT_TOKENS)
        return c->tokenizer_set || s->block_size != 0
                   ? not_for(c, c->tokenizer_set ? "tokenizer" : "block_size",
                             "token-sequence (\"format\": \"tokens\")")
                   : MT_OK;
    if (s->block_size == 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.block_size: required for tokens datasets (tokens per example)",
                          c->path);
    if (bpe && !c->vocab_size_set)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.tokenizer.vocab_size: required for a bpe tokenizer (256 bytes + "
                          "merges, e.g. 512)",
                          c->path);
    if (bpe ? s->vocab_size < 256 : s->vocab_size == 1)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.tokenizer.vocab_size: %zu is too small (%s)", c->path, s->vocab_size,
                          bpe ? "bpe: at least 256, the bytes"
                              : "char: 0 for every character, else at least 2");
    if (s->augment.flip != 0 || s->augment.crop_padding != 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.augment: text has no image to augment",
                          c->path);
    return MT_OK;
}

/* The fields of the NumPy, image-folder and label options. MT_NOT_FOUND: not one of them. */
static mt_code parse_field_more(parse_ctx *c, mt_data_spec *s, const cJSON *v)
{
    const char *k = v->string;
    mt_code rc;

    if (strcmp(k, "label_type") == 0) {
        static const char *const types[] = {"int", "string", "float"};
        for (int i = 0; i < 3; i++) {
            if (cJSON_IsString(v) && strcmp(v->valuestring, types[i]) == 0) {
                s->label_type = (mt_data_label_type)i;
                return MT_OK;
            }
        }
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.label_type: must be \"int\" (class ids), \"string\" (class names) "
                          "or \"float\" (regression targets)",
                          c->path);
    }
    if (strcmp(k, "class_names") == 0)
        return get_names(c, v, k, &s->class_names, &s->n_class_names);
    if (strcmp(k, "missing") == 0) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "refuse") == 0)
            s->missing = MT_DATA_MISSING_REFUSE;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "fill") == 0)
            s->missing = MT_DATA_MISSING_FILL;
        else
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.missing: must be \"refuse\" or \"fill\"", c->path);
        return MT_OK;
    }
    if (strcmp(k, "fill_value") == 0) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.fill_value: must be a number",
                              c->path);
        s->fill_value = (float)v->valuedouble;
        return MT_OK;
    }
    if (strcmp(k, "x_key") == 0)
        return get_string_key(c, v, k, &s->x_key);
    if (strcmp(k, "y_key") == 0)
        return get_string_key(c, v, k, &s->y_key);
    if (strcmp(k, "image_size") == 0) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.image_size: must be [height, width]",
                              c->path);
        for (int i = 0; i < 2; i++) {
            char f[32];
            snprintf(f, sizeof(f), "image_size[%d]", i);
            rc = get_uint(c, cJSON_GetArrayItem(v, i), f, 1, 8192, &s->image_size[i]);
            if (rc != MT_OK)
                return rc;
        }
        return MT_OK;
    }
    if (strcmp(k, "color_mode") == 0) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "grayscale") == 0)
            s->channels = 1;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "rgb") == 0)
            s->channels = 3;
        else
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.color_mode: must be \"rgb\" or \"grayscale\"", c->path);
        return MT_OK;
    }
    if (strcmp(k, "mean") == 0)
        return get_channel_values(c, v, k, false, s->mean);
    if (strcmp(k, "std") == 0)
        return get_channel_values(c, v, k, true, s->std);
    if (strcmp(k, "augment") == 0)
        return parse_augment(c, s, v);
    if (strcmp(k, "tokenizer") == 0)
        return parse_tokenizer(c, s, v);
    if (strcmp(k, "block_size") == 0)
        return get_uint(c, v, k, 1, 1u << 16, &s->block_size);
    return MT_NOT_FOUND;
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
        if (cJSON_IsArray(v))
            return get_target_columns(c, s, v);
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
        c->scale_set = true;
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
    if (strcmp(k, "prefetch") == 0) {
        s->prefetch_set = true;
        return get_uint(c, v, k, 0, 64, &s->prefetch);
    }
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
    rc = parse_field_more(c, s, v);
    if (rc != MT_NOT_FOUND)
        return rc;
    return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: unknown field", c->path, k);
}

/* A field given for a format that does not read it: INVALID_ARGUMENT naming both. */
static mt_code not_for(parse_ctx *c, const char *field, const char *which)
{
    return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: only %s datasets take this field",
                      c->path, field, which);
}

/* Label options: which formats take them and how they combine. */
static mt_code check_labels(parse_ctx *c, mt_data_spec *s)
{
    bool csv = s->format == MT_DATA_FORMAT_CSV, npy = s->format == MT_DATA_FORMAT_NPY;
    bool images = s->format == MT_DATA_FORMAT_IMAGES;

    if (!csv && !npy && s->label_type != MT_DATA_LABEL_INT)
        return images ? mt_err_set(c->err, MT_INVALID_ARGUMENT,
                                   "%s.label_type: image folders are labelled by their "
                                   "sub-folder names (class_names orders them)",
                                   c->path)
                      : not_for(c, "label_type", "CSV and NPY");
    if (npy && s->label_type == MT_DATA_LABEL_STRING)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.label_type: NPY labels are numbers (\"int\" or \"float\")", c->path);
    if (images)
        s->label_type = MT_DATA_LABEL_STRING;
    if (s->class_names != NULL && s->label_type != MT_DATA_LABEL_STRING)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.class_names: needs \"label_type\": \"string\" (CSV) or an image "
                          "folder dataset",
                          c->path);
    if (s->target_cols != NULL && s->label_type != MT_DATA_LABEL_FLOAT)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.label_column: several label columns need \"label_type\": \"float\" "
                          "(regression targets)",
                          c->path);
    if (s->label_type == MT_DATA_LABEL_FLOAT && s->num_classes != 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.num_classes: float (regression) targets have no classes", c->path);
    return MT_OK;
}

/* Format-specific checks after all fields are read. */
static mt_code check_spec(parse_ctx *c, mt_data_spec *s)
{
    bool csv = s->format == MT_DATA_FORMAT_CSV, npy = s->format == MT_DATA_FORMAT_NPY;
    bool images = s->format == MT_DATA_FORMAT_IMAGES;
    mt_code rc;

    if (!csv && (s->label_column_set || s->feature_cols != NULL))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.%s: only CSV datasets have columns",
                          c->path, s->label_column_set ? "label_column" : "feature_columns");
    if (!csv && s->shape[0] != 0)
        return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                          "%s.shape: only CSV datasets take a shape (IDX files carry theirs)",
                          c->path);
    if (!csv && (s->missing != MT_DATA_MISSING_REFUSE || s->fill_value != 0.0f))
        return not_for(c, s->missing != MT_DATA_MISSING_REFUSE ? "missing" : "fill_value", "CSV");
    if (!npy && (s->x_key != NULL || s->y_key != NULL))
        return not_for(c, s->x_key != NULL ? "x_key" : "y_key", "NPY");
    if (!images && (s->image_size[0] != 0 || s->channels != 0 || s->mean[0] != 0.0f ||
                    s->mean[1] != 0.0f || s->mean[2] != 0.0f || s->std[0] != 0.0f))
        return not_for(c,
                       s->image_size[0] != 0 ? "image_size"
                       : s->channels != 0    ? "color_mode"
                       : s->std[0] != 0.0f   ? "std"
                                             : "mean",
                       "image-folder (\"format\": \"images\")");
    if (s->format == MT_DATA_FORMAT_TEXT && (s->augment.flip != 0 || s->augment.crop_padding != 0))
        return mt_err_set(c->err, MT_INVALID_ARGUMENT, "%s.augment: text has no image to augment",
                          c->path);
    rc = check_labels(c, s);
    if (rc == MT_OK)
        rc = check_tokens(c, s);
    if (rc != MT_OK)
        return rc;
    if (npy) {
        if ((s->x_key == NULL && (s->x_key = mt_strdup("x")) == NULL) ||
            (s->y_key == NULL && (s->y_key = mt_strdup("y")) == NULL))
            return oom(c);
    }
    if (images) {
        if (s->image_size[0] == 0)
            return mt_err_set(c->err, MT_INVALID_ARGUMENT,
                              "%s.image_size: required for image folders ([height, width] every "
                              "image is resized to)",
                              c->path);
        if (s->channels == 0)
            s->channels = 3;
        if (!c->scale_set)
            s->scale = 1.0f / 255.0f;
        if (s->std[0] == 0.0f)
            s->std[0] = s->std[1] = s->std[2] = 1.0f;
        s->shape[0] = s->image_size[0];
        s->shape[1] = s->image_size[1];
        s->shape[2] = s->channels;
        if (s->augment.crop_padding >= s->image_size[0] ||
            s->augment.crop_padding >= s->image_size[1])
            return mt_err_set(
                c->err, MT_INVALID_ARGUMENT,
                "%s.augment.crop_padding: %zu must be smaller than the image (%zux%zu)", c->path,
                s->augment.crop_padding, s->image_size[0], s->image_size[1]);
        return MT_OK;
    }
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
    parse_ctx c = {json_path != NULL ? json_path : "dataset", base_dir, err, false, false, false};
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
    else if (cJSON_IsString(fmt) &&
             (strcmp(fmt->valuestring, "npy") == 0 || strcmp(fmt->valuestring, "npz") == 0))
        s->format = MT_DATA_FORMAT_NPY;
    else if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "images") == 0)
        s->format = MT_DATA_FORMAT_IMAGES;
    else if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "tokens") == 0)
        s->format = MT_DATA_FORMAT_TOKENS;
    else if ((cJSON_IsString(fmt) && strcmp(fmt->valuestring, "idx") == 0) ||
             (fmt == NULL && (cJSON_GetObjectItemCaseSensitive(node, "train_images") != NULL ||
                              cJSON_GetObjectItemCaseSensitive(node, "train_labels") != NULL)))
        s->format = MT_DATA_FORMAT_IDX;
    else {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s.format: must be \"csv\", \"text\", \"idx\", \"npy\", \"images\" or "
                        "\"tokens\"",
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
