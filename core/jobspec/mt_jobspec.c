/* SPDX-License-Identifier: MIT */
/*
 * mt_jobspec.c — whole-spec validation shared by SubmitJob and `meshtrain plan` (contract in
 * mt_jobspec.h). The order of the checks is the order a person fixes a spec in: syntax and
 * top-level fields, model, dataset, mesh, layouts against the model's real parameter shapes,
 * then the coordinator's own sections (checkpoint, restart, elastic).
 */
#include "jobspec/mt_jobspec.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <libgen.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "layout/mt_layout.h"
#include "mesh/mt_mesh.h"
#include "model/mt_model.h"
#include "pathsafe/mt_pathsafe.h"
#include "repro/mt_repro.h"
#include "spmd/mt_spmd.h"

/* A non-negative integer field of obj in [lo, hi]; absent keeps *out. */
static mt_code get_uint(const cJSON *obj, const char *key, const char *sect, double lo, double hi,
                        uint32_t *out, mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (n == NULL)
        return MT_OK;
    if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble) || n->valuedouble < lo ||
        n->valuedouble > hi)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: must be an integer in %.0f..%.0f", sect,
                          key, lo, hi);
    *out = (uint32_t)n->valuedouble;
    return MT_OK;
}

/* Refuse keys of obj that are not in keys (NULL-terminated). */
static mt_code only_keys(const cJSON *obj, const char *sect, const char *const *keys, mt_err *err)
{
    size_t n = 0;

    while (keys[n] != NULL)
        n++;
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        int ok = 0;
        for (int i = 0; keys[i] != NULL && !ok; i++)
            ok = strcmp(it->string, keys[i]) == 0;
        if (!ok) {
            const char *near = mt_status_suggest(it->string, keys, n);
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: unknown field%s%s%s", sect,
                              it->string, near ? "; did you mean " : "", near ? near : "",
                              near ? "?" : "");
        }
    }
    return MT_OK;
}

static mt_code check_sections(const cJSON *root, mt_jobspec_summary *s, mt_err *err)
{
    static const char *const ck_keys[] = {"every_steps", "keep", NULL};
    static const char *const rs_keys[] = {"max_restarts", "collective_deadline_ms", NULL};
    static const char *const el_keys[] = {"min_batch", "max_batch", NULL};
    static const char *const in_keys[] = {"job", "step", NULL};
    const cJSON *n;
    mt_code rc;

    s->ckpt_keep = 3;
    s->max_restarts = 3;
    if ((n = cJSON_GetObjectItemCaseSensitive(root, "checkpoint")) != NULL) {
        if (!cJSON_IsObject(n))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint: must be an object");
        if ((rc = only_keys(n, "checkpoint", ck_keys, err)) != MT_OK ||
            (rc = get_uint(n, "every_steps", "checkpoint", 1, 1e9, &s->ckpt_every_steps, err)) !=
                MT_OK ||
            (rc = get_uint(n, "keep", "checkpoint", 1, 1000, &s->ckpt_keep, err)) != MT_OK)
            return rc;
    }
    if ((n = cJSON_GetObjectItemCaseSensitive(root, "restart")) != NULL) {
        if (!cJSON_IsObject(n))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "restart: must be an object");
        if ((rc = only_keys(n, "restart", rs_keys, err)) != MT_OK ||
            (rc = get_uint(n, "max_restarts", "restart", 0, 1000, &s->max_restarts, err)) !=
                MT_OK ||
            (rc = get_uint(n, "collective_deadline_ms", "restart", 100, 3600000,
                           &s->coll_deadline_ms, err)) != MT_OK)
            return rc;
    }
    if ((n = cJSON_GetObjectItemCaseSensitive(root, "elastic")) != NULL) {
        uint32_t lo = 1, hi = 65536;
        if (!cJSON_IsObject(n))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "elastic: must be an object");
        if ((rc = only_keys(n, "elastic", el_keys, err)) != MT_OK ||
            (rc = get_uint(n, "min_batch", "elastic", 1, 65536, &lo, err)) != MT_OK ||
            (rc = get_uint(n, "max_batch", "elastic", 1, 65536, &hi, err)) != MT_OK)
            return rc;
        if (hi < lo)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "elastic.max_batch: %u is smaller than min_batch %u", hi, lo);
        /* only a purely data-parallel mesh (one "batch" dimension) resizes; others keep their
         * mesh on a restart (the section is accepted and ignored) */
        if (s->mesh_ndims == 1 && strcmp(s->mesh_names[0], "batch") == 0) {
            s->elastic_min_batch = lo;
            s->elastic_max_batch = hi;
        }
    }
    if ((n = cJSON_GetObjectItemCaseSensitive(root, "init_from")) != NULL) {
        const cJSON *job = cJSON_GetObjectItemCaseSensitive(n, "job");
        if (!cJSON_IsObject(n))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "init_from: must be an object");
        if ((rc = only_keys(n, "init_from", in_keys, err)) != MT_OK)
            return rc;
        if (!cJSON_IsString(job) || job->valuestring[0] == '\0' ||
            strlen(job->valuestring) >= sizeof(s->init_job))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "init_from.job: must be a job id such as \"job-000003\"");
        snprintf(s->init_job, sizeof(s->init_job), "%s", job->valuestring);
        if ((rc = get_uint(n, "step", "init_from", 1, 1e9, &s->init_step, err)) != MT_OK)
            return rc;
    }
    return MT_OK;
}

static int uses_pipeline_form(const cJSON *ds)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(ds, "format");

    if (!cJSON_IsObject(ds))
        return 0;
    return cJSON_GetObjectItemCaseSensitive(ds, "train") != NULL ||
           (cJSON_IsString(f) && strcmp(f->valuestring, "idx") != 0);
}

static bool is_synthetic(const cJSON *ds)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(ds, "format");
    return cJSON_IsString(f) && strcmp(f->valuestring, "synthetic") == 0;
}

/* ------------------------------------------------------------------ dataset paths */

/*
 * One walk over every file path the "dataset" section names (docs/job-spec.md "Dataset paths"):
 * the flat IDX keys, and "train"/"test" as a path, a list of paths or IDX pairs, {"files": [...]}
 * or {"glob": "p"}. It checks the types of those fields (the messages core/data gives) and calls
 * visit on each path string. It opens nothing.
 */
typedef struct path_walk path_walk;
struct path_walk {
    mt_code (*visit)(path_walk *w, const char *field, cJSON *str);
    const char *base_dir;     /* relative paths resolve against it (NULL: the working dir) */
    const mt_pathsafe *roots; /* check_files: confine to these (NULL: no confinement) */
    bool changed;             /* absolutize: a path was rewritten */
    bool dirs; /* the dataset's entries are folders ("images"): a directory is fine */
    mt_err *err;
};

static mt_code walk_string(path_walk *w, const char *field, cJSON *n)
{
    if (!cJSON_IsString(n) || n->valuestring[0] == '\0')
        return mt_err_set(w->err, MT_INVALID_ARGUMENT, "%s: must be a non-empty path string",
                          field);
    if (strlen(n->valuestring) >= MT_SPEC_PATH_MAX)
        return mt_err_set(w->err, MT_INVALID_ARGUMENT, "%s: path longer than %d bytes", field,
                          MT_SPEC_PATH_MAX - 1);
    return w->visit(w, field, n);
}

/* An IDX pair {"images": ..., "labels": ...} or a NumPy pair {"x": ..., "y": ...}. */
static mt_code walk_pair(path_walk *w, const char *field, cJSON *o)
{
    bool npy = cJSON_GetObjectItemCaseSensitive(o, "images") == NULL &&
               cJSON_GetObjectItemCaseSensitive(o, "x") != NULL;
    const char *ka = npy ? "x" : "images", *kb = npy ? "y" : "labels";
    cJSON *a = cJSON_GetObjectItemCaseSensitive(o, ka);
    cJSON *b = cJSON_GetObjectItemCaseSensitive(o, kb);
    char f[192];
    mt_code rc;

    if (!cJSON_IsString(a) || !cJSON_IsString(b))
        return mt_err_set(w->err, MT_INVALID_ARGUMENT,
                          npy ? "%s: an NPY pair is {\"x\": \"x.npy\", \"y\": \"y.npy\"}"
                              : "%s: an IDX entry needs string fields \"images\" and \"labels\"",
                          field);
    snprintf(f, sizeof(f), "%s.%s", field, ka);
    if ((rc = walk_string(w, f, a)) != MT_OK)
        return rc;
    snprintf(f, sizeof(f), "%s.%s", field, kb);
    return walk_string(w, f, b);
}

static mt_code walk_list(path_walk *w, const char *field, cJSON *arr)
{
    cJSON *e;
    size_t i = 0;
    mt_code rc;

    if (cJSON_IsString(arr))
        return walk_string(w, field, arr);
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
        return mt_err_set(w->err, MT_INVALID_ARGUMENT,
                          "%s: must be a path, a list of paths, or {\"files\"|\"glob\": ...}",
                          field);
    cJSON_ArrayForEach(e, arr)
    {
        char f[192];
        snprintf(f, sizeof(f), "%s[%zu]", field, i++);
        rc = cJSON_IsObject(e) ? walk_pair(w, f, e) : walk_string(w, f, e);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

static mt_code walk_split(path_walk *w, const char *field, cJSON *v)
{
    cJSON *files, *gl;
    char f[192];

    if (!cJSON_IsObject(v))
        return walk_list(w, field, v);
    files = cJSON_GetObjectItemCaseSensitive(v, "files");
    gl = cJSON_GetObjectItemCaseSensitive(v, "glob");
    if (files != NULL && gl != NULL)
        return mt_err_set(w->err, MT_INVALID_ARGUMENT,
                          "%s: give either \"files\" or \"glob\", not both", field);
    if (gl != NULL) {
        snprintf(f, sizeof(f), "%s.glob", field);
        return walk_string(w, f, gl);
    }
    if (files != NULL) {
        snprintf(f, sizeof(f), "%s.files", field);
        return walk_list(w, f, files);
    }
    return walk_pair(w, field, v);
}

static mt_code walk_dataset(path_walk *w, cJSON *ds)
{
    static const char *const flat[] = {"train_images", "train_labels", "test_images",
                                       "test_labels"};
    static const char *const splits[] = {"train", "test"};
    char f[64];
    cJSON *n;
    mt_code rc;

    if (!cJSON_IsObject(ds) || is_synthetic(ds))
        return MT_OK; /* absent: the packaged Fashion-MNIST files (absolute paths) */
    n = cJSON_GetObjectItemCaseSensitive(ds, "format");
    w->dirs = cJSON_IsString(n) && strcmp(n->valuestring, "images") == 0;
    for (int i = 0; i < 4; i++)
        if ((n = cJSON_GetObjectItemCaseSensitive(ds, flat[i])) != NULL) {
            snprintf(f, sizeof(f), "dataset.%s", flat[i]);
            if ((rc = walk_string(w, f, n)) != MT_OK)
                return rc;
        }
    for (int i = 0; i < 2; i++)
        if ((n = cJSON_GetObjectItemCaseSensitive(ds, splits[i])) != NULL) {
            snprintf(f, sizeof(f), "dataset.%s", splits[i]);
            if ((rc = walk_split(w, f, n)) != MT_OK)
                return rc;
        }
    return MT_OK;
}

/* base_dir/p into buf when p is relative and base_dir given, else p. INVALID_ARGUMENT when too
 * long. */
static mt_code join_path(const char *base_dir, const char *p, const char *field, char *buf,
                         size_t cap, mt_err *err)
{
    int n;

    if (p[0] == '/' || base_dir == NULL || base_dir[0] == '\0')
        n = snprintf(buf, cap, "%s", p);
    else
        n = snprintf(buf, cap, "%s/%s", base_dir, p);
    if (n < 0 || (size_t)n >= cap)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: path longer than %zu bytes", field,
                          cap - 1);
    return MT_OK;
}

static mt_code visit_absolutize(path_walk *w, const char *field, cJSON *str)
{
    char full[MT_SPEC_PATH_MAX];
    mt_code rc;

    if (str->valuestring[0] == '/')
        return MT_OK;
    if ((rc = join_path(w->base_dir, str->valuestring, field, full, sizeof(full), w->err)) != MT_OK)
        return rc;
    if (cJSON_SetValuestring(str, full) == NULL)
        return mt_err_set(w->err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", field);
    w->changed = true;
    return MT_OK;
}

mt_code mt_jobspec_absolute_paths(const char *json, size_t len, const char *base_dir, char **out,
                                  size_t *out_len, mt_err *err)
{
    cJSON *root =
        json != NULL && len <= MT_JOBSPEC_MAX_SIZE ? cJSON_ParseWithLength(json, len) : NULL;
    path_walk w = {visit_absolutize, base_dir, NULL, false, false, err};
    char *text = NULL;
    mt_code rc = MT_OK;

    *out = NULL;
    *out_len = 0;
    if (root != NULL && cJSON_IsObject(root))
        rc = walk_dataset(&w, cJSON_GetObjectItemCaseSensitive(root, "dataset"));
    if (rc == MT_INVALID_ARGUMENT)
        rc = MT_OK; /* a malformed section goes as it is: the validation words the problem */
    if (rc == MT_OK && w.changed) {
        char *p = cJSON_PrintUnformatted(root);
        if (p != NULL) {
            *out_len = strlen(p);
            text = mt_malloc(*out_len + 1);
            if (text != NULL)
                memcpy(text, p, *out_len + 1);
            cJSON_free(p);
        }
    } else if (rc == MT_OK && json != NULL) {
        *out_len = len;
        text = mt_malloc(len + 1);
        if (text != NULL) {
            memcpy(text, json, len);
            text[len] = '\0';
        }
    }
    cJSON_Delete(root);
    if (rc == MT_OK && text == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job spec: out of memory");
    if (rc != MT_OK) {
        mt_free(text);
        *out_len = 0;
        return rc;
    }
    *out = text;
    return MT_OK;
}

/* What kind of non-regular file st describes. */
static const char *file_kind(const struct stat *st)
{
    if (S_ISDIR(st->st_mode))
        return "a directory";
    if (S_ISFIFO(st->st_mode))
        return "a FIFO";
    if (S_ISCHR(st->st_mode))
        return "a character device";
    if (S_ISBLK(st->st_mode))
        return "a block device";
    if (S_ISSOCK(st->st_mode))
        return "a socket";
    return "not a regular file";
}

/* A file that exists must be a regular one, or a directory when dirs (image folders) (stat:
 * follows links, opens nothing). */
static mt_code check_regular(const char *field, const char *path, bool dirs, mt_err *err)
{
    struct stat st;

    if (stat(path, &st) != 0 || S_ISREG(st.st_mode) || (dirs && S_ISDIR(st.st_mode)))
        return MT_OK; /* missing: the reader says NOT_FOUND with its own message */
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "%s: %s is %s, not a regular file (datasets are read from regular files "
                      "only)",
                      field, path, file_kind(&st));
}

static mt_code visit_check_file(path_walk *w, const char *field, cJSON *str)
{
    char full[MT_SPEC_PATH_MAX + 512];
    mt_code rc;
    glob_t g;

    if ((rc = join_path(w->base_dir, str->valuestring, field, full, sizeof(full), w->err)) != MT_OK)
        return rc;
    if (strpbrk(str->valuestring, "*?[") == NULL) {
        if (w->roots != NULL && (rc = mt_pathsafe_check(w->roots, full, MT_PATHSAFE_MAY_BE_MISSING,
                                                        NULL, 0, w->err)) != MT_OK)
            return rc;
        return check_regular(field, full, w->dirs, w->err);
    }
    if (w->roots != NULL && (rc = mt_pathsafe_check_glob(w->roots, full, w->err)) != MT_OK &&
        rc != MT_NOT_FOUND)
        return rc;
    memset(&g, 0, sizeof(g));
    if (glob(full, GLOB_ERR, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc && rc == MT_OK; i++)
            rc = check_regular(field, g.gl_pathv[i], w->dirs, w->err);
    else
        rc = MT_OK; /* no match: the data spec parser words it */
    globfree(&g);
    return rc;
}

mt_code mt_jobspec_check_files(const mt_jobspec *js, const char *base_dir,
                               const struct mt_pathsafe *roots, mt_err *err)
{
    path_walk w = {visit_check_file, base_dir, roots, false, false, err};
    mt_code rc;

    if ((rc = walk_dataset(&w, (cJSON *)js->dataset)) != MT_OK)
        return rc;
    if (roots != NULL)
        rc = mt_pathsafe_check_job_spec(roots, js->model, err); /* the defaults too */
    return rc;
}

/* Structure only: a relative path cannot be placed without the spec's folder. */
static mt_code visit_structure(path_walk *w, const char *field, cJSON *str)
{
    if (str->valuestring[0] == '/' || w->base_dir != NULL)
        return MT_OK;
    return mt_err_set(w->err, MT_INVALID_ARGUMENT,
                      "%s: relative path '%s' in a spec without its folder: give an absolute path "
                      "(`meshtrain submit FILE` makes a spec's relative paths absolute against "
                      "the file's folder)",
                      field, str->valuestring);
}

/* The per-example input shape a dataset section fixes without reading a file (rank 0 when it
 * does not: IDX files carry their shape). */
static void structure_shape(const cJSON *ds, mt_jobspec_summary *s)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(ds, "format");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(ds, "shape");
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(ds, "feature_columns");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(ds, "max_tokens");
    int n = cJSON_GetArraySize(shape);

    if (cJSON_IsArray(shape) && (n == 2 || n == 3)) {
        s->input_shape[2] = 1;
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(shape, i);
            if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > (1 << 20) ||
                e->valuedouble != floor(e->valuedouble))
                return;
            s->input_shape[i] = (size_t)e->valuedouble;
        }
        s->input_rank = 3;
    } else if (cJSON_IsArray(cols) && cJSON_GetArraySize(cols) > 0) {
        s->input_rank = 1;
        s->input_shape[0] = (size_t)cJSON_GetArraySize(cols);
    } else if (cJSON_IsString(f) && strcmp(f->valuestring, "text") == 0) {
        s->input_rank = 1;
        s->input_shape[0] = 1200; /* core/data's default max_tokens */
        if (cJSON_IsNumber(mt) && mt->valuedouble >= 2 && mt->valuedouble <= (1 << 22) &&
            mt->valuedouble == floor(mt->valuedouble))
            s->input_shape[0] = (size_t)mt->valuedouble;
    }
}

static mt_code structure_probe(const mt_jobspec *js, const mt_jobspec_opts *o,
                               mt_jobspec_summary *s, mt_err *err)
{
    path_walk w = {visit_structure, o->base_dir, NULL, false, false, err};
    mt_code rc = walk_dataset(&w, (cJSON *)js->dataset);

    if (rc == MT_OK && s->input_rank == 0 && uses_pipeline_form(js->dataset))
        structure_shape(js->dataset, s);
    return rc;
}

/* Read the first `want` bytes of a (possibly gzipped) file. 1 on success. */
static int read_head(const char *path, unsigned char *buf, int want)
{
    gzFile f = gzopen(path, "rb");
    int n;

    if (f == NULL)
        return 0;
    n = gzread(f, buf, (unsigned)want);
    gzclose(f);
    return n == want;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* IDX headers of the training images: example count and per-example shape (H, W, 1). */
static mt_code idx_probe(const mt_dataset_spec *ds, const char *base_dir, mt_jobspec_summary *s,
                         mt_err *err)
{
    unsigned char h[20];
    char path[MT_SPEC_PATH_MAX + 512];
    int dims;
    mt_code rc;

    /* relative to the spec's folder, as every dataset path (mt_jobspec_absolute_paths) */
    rc = join_path(base_dir, ds->train_images, "dataset.train_images", path, sizeof(path), err);
    if (rc != MT_OK)
        return rc;
    if (!read_head(path, h, 8))
        return mt_err_set(err, MT_NOT_FOUND, "dataset.train_images: cannot read IDX file %s", path);
    dims = h[3];
    if (h[0] != 0 || h[1] != 0 || dims < 1 || dims > 4 || !read_head(path, h, 4 + 4 * dims))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset.train_images: %s is not an IDX file",
                          path);
    s->train_examples = be32(h + 4);
    if (s->input_rank == 0) {
        if (dims == 1) {
            s->input_rank = 1;
            s->input_shape[0] = 1;
        } else if (dims == 2) {
            s->input_rank = 1;
            s->input_shape[0] = be32(h + 8);
        } else {
            s->input_rank = 3;
            s->input_shape[0] = be32(h + 8);
            s->input_shape[1] = be32(h + 12);
            s->input_shape[2] = dims == 4 ? be32(h + 16) : 1;
        }
    }
    return MT_OK;
}

/* Input-pipeline form of the dataset section: validate with core/data, infer the input shape. */
static mt_code data_probe(const cJSON *node, const char *base_dir, mt_jobspec_summary *s,
                          mt_err *err)
{
    mt_data_spec *ds = NULL;
    mt_code rc = mt_data_spec_parse(node, "dataset", base_dir, &ds, err);

    if (rc != MT_OK)
        return rc;
    if (s->input_rank == 0) {
        if (ds->shape[0] != 0) {
            s->input_rank = 3;
            memcpy(s->input_shape, ds->shape, sizeof(s->input_shape));
        } else if (ds->format == MT_DATA_FORMAT_TEXT) {
            s->input_rank = 1;
            s->input_shape[0] = ds->max_tokens;
        } else if (ds->format == MT_DATA_FORMAT_TOKENS) {
            s->input_rank = 1;
            s->input_shape[0] = ds->block_size;
        } else if (ds->n_feature_cols > 0) {
            s->input_rank = 1;
            s->input_shape[0] = ds->n_feature_cols;
        }
    }
    mt_data_spec_free(ds);
    if (s->input_rank == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.input_shape: required when the dataset does not fix the "
                          "example shape (give input_shape, dataset.shape or "
                          "dataset.feature_columns)");
    return MT_OK;
}

/* The generated dataset: its fields as the trainer reads them; (features) examples. */
static mt_code synthetic_probe(const mt_job_spec *spec, const cJSON *node, mt_jobspec_summary *s,
                               mt_err *err)
{
    mt_spmd_synthetic syn;
    mt_code rc = mt_spmd_synthetic_parse(spec, node, &syn, err);

    if (rc != MT_OK)
        return rc;
    if (s->input_rank == 0) {
        s->input_rank = 1;
        s->input_shape[0] = syn.features;
    }
    s->train_examples = syn.examples;
    return MT_OK;
}

/*
 * The spec's "loss" against the model's output and the dataset's labels, as the trainer checks it
 * (mt_loss_check, messages naming "loss"): class labels (one per example) for IDX, synthetic and
 * every core/data format but NumPy and tokens (block_size labels: the next tokens), float targets
 * for "label_type": "float" (CSV: one per "label_column"). NumPy's label shape is in its files: the
 * trainer checks it when it loads them.
 */
static mt_code loss_probe(const mt_job_spec *spec, const cJSON *node, bool pipeline,
                          const char *base_dir, const mt_jobspec_summary *s, mt_err *err)
{
    size_t y_dim = 1, t_dim = 0, (*shapes)[3] = NULL;
    int *ranks = NULL;
    mt_loss_shape out;
    mt_code rc = MT_OK;

    if (pipeline && !is_synthetic(node)) {
        mt_data_spec *ds = NULL;
        if ((rc = mt_data_spec_parse(node, "dataset", base_dir, &ds, err)) != MT_OK)
            return rc;
        if (ds->label_type == MT_DATA_LABEL_FLOAT)
            t_dim = ds->n_target_cols > 0 ? ds->n_target_cols : 1;
        if (ds->format == MT_DATA_FORMAT_NPY)
            y_dim = t_dim = 0; /* unknown here */
        if (ds->format == MT_DATA_FORMAT_TOKENS)
            y_dim = ds->block_size; /* the next token of every position */
        mt_data_spec_free(ds);
        if (y_dim == 0)
            return MT_OK;
    }
    ranks = mt_calloc((size_t)spec->n_layers + 1, sizeof(*ranks));
    shapes = mt_calloc((size_t)spec->n_layers + 1, sizeof(*shapes));
    if (ranks == NULL || shapes == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "loss: out of memory");
    if (rc == MT_OK)
        rc = mt_model_spec_shapes(spec, s->input_rank, s->input_shape, ranks, shapes, err);
    if (rc == MT_OK) {
        mt_model_output_view(ranks[spec->n_layers - 1], shapes[spec->n_layers - 1], &out);
        rc = mt_loss_check(&spec->loss, &out, y_dim, t_dim, err);
    }
    mt_free(ranks);
    mt_free(shapes);
    return rc;
}

static void mesh_summary(const mt_mesh *m, mt_jobspec_summary *s)
{
    s->mesh_ndims = mt_mesh_ndims(m);
    for (int i = 0; i < s->mesh_ndims; i++) {
        snprintf(s->mesh_names[i], sizeof(s->mesh_names[i]), "%s", mt_mesh_dim_name(m, i));
        s->mesh_sizes[i] = mt_mesh_dim_size(m, i);
    }
    s->n_devices = mt_mesh_num_devices(m);
    mt_mesh_format(m, s->mesh_text, sizeof(s->mesh_text));
}

/*
 * Check the model, its layouts and the mesh exactly as the trainer will (mt_spmd_check: the same
 * planner and messages) and take what one device holds and communicates from it.
 */
static mt_code check_params(const mt_jobspec *js, const mt_mesh *mesh, const mt_jobspec_opts *o,
                            mt_jobspec_summary *s, mt_err *err)
{
    const mt_job_spec *spec = js->model;
    mt_model *model = NULL;
    mt_spmd_plan_info info = {.layers = o->layers};
    mt_code rc;

    mt_model_limits lim = MT_MODEL_LIMITS_DEFAULTS;
    mt_job_spec shapes_only = *spec;

    /* sizes from the layer list before anything is allocated (core/model) */
    lim.max_params = MT_JOBSPEC_MAX_PARAMS;
    rc = mt_model_check_limits(spec, s->input_rank, s->input_shape, spec->batch_size, &lim, err);
    if (rc != MT_OK)
        return rc;
    /* only the shapes matter here: plain SGD allocates no optimizer slots */
    shapes_only.optimizer.kind = MT_OPT_SGD;
    shapes_only.optimizer.momentum = 0.0f;
    rc = mt_model_new(&shapes_only, s->input_rank, s->input_shape, 1, &model, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_spmd_check(spec, mesh, js->cfg.layouts, s->input_rank, s->input_shape, spec->batch_size,
                       &info, err);
    if (rc != MT_OK)
        goto out;
    s->n_params = mt_model_param_count(model);
    for (size_t i = 0; i < s->n_params; i++) {
        const mt_model_param *p = mt_model_param_at(model, i);
        uint64_t elems = 1;
        for (int a = 0; a < p->rank; a++)
            elems *= p->shape[a];
        s->param_elements += elems;
    }
    s->weight_bytes_per_device = info.weight_bytes;
    s->optimizer_bytes_per_device = info.slot_bytes;
    s->gathered_bytes_per_device = info.gathered_bytes;
    s->activation_bytes_per_device = info.activation_bytes;
    s->work_bytes_per_device = info.work_bytes;
    if (o->n_layers != NULL)
        *o->n_layers = info.n_layers;
    for (int k = 0; k < info.ndims && k < MT_JOBSPEC_MAX_DIMS; k++)
        s->comm_bytes_per_step[k] = info.comm_bytes[k];
    s->halo_dim = info.halo_dim;
    s->halo_bytes_per_step = info.halo_bytes;
out:
    mt_model_free(model);
    return rc;
}

/*
 * "reproducibility": "mesh_invariant" (docs/reproducibility.md, Mesh-invariant mode): a batch
 * dimension that cannot keep the bits is INVALID_ARGUMENT naming the sizes that can, and so is an
 * elastic range with a replica count the job may resize to that cannot; what the
 * engine does not run in that mode yet (a layer kind without leaf kernels) is UNIMPLEMENTED
 * naming it; model and feature splits are checked by core/spmd's plan (mt_spmd_check).
 */
static mt_code check_mesh_invariant(const mt_job_spec *spec, const mt_mesh *mesh,
                                    const mt_layout_map *map, const mt_jobspec_summary *s,
                                    mt_err *err)
{
    static const char *const done = "dense, conv2d, max_pool2d, "
                                    "average_pooling2d, global_average_pooling2d, batch_norm, "
                                    "layer_norm, dropout, flatten, activation, add, concatenate, "
                                    "embedding, position_embedding, attention";
    int bdim = mt_spmd_batch_dim(mesh, map);
    int p = bdim >= 0 ? mt_mesh_dim_size(mesh, bdim) : 1;
    mt_code rc = mt_repro_check_mesh(spec->batch_size, p, err);
    if (rc == MT_OK && s->elastic_min_batch > 0) /* elastic: every size it may resize to */
        rc = mt_repro_check_elastic(spec->batch_size, s->elastic_min_batch, s->elastic_max_batch,
                                    err);
    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < spec->n_layers; i++) {
        mt_layer_kind kd = spec->layers[i].kind;
        if (kd != MT_LAYER_DENSE && kd != MT_LAYER_CONV2D && kd != MT_LAYER_MAX_POOL2D &&
            kd != MT_LAYER_AVERAGE_POOLING2D && kd != MT_LAYER_GLOBAL_AVERAGE_POOLING2D &&
            kd != MT_LAYER_BATCH_NORM && kd != MT_LAYER_LAYER_NORM && kd != MT_LAYER_DROPOUT &&
            kd != MT_LAYER_FLATTEN && kd != MT_LAYER_ACTIVATION && kd != MT_LAYER_ADD &&
            kd != MT_LAYER_CONCATENATE && kd != MT_LAYER_EMBEDDING &&
            kd != MT_LAYER_POSITION_EMBEDDING && kd != MT_LAYER_ATTENTION)
            return mt_err_set(err, MT_UNIMPLEMENTED,
                              "model.layers[%d] (%s): reproducibility: \"mesh_invariant\" does "
                              "not run this layer kind yet (done: %s)",
                              i, spec->layers[i].name, done);
    }
    return MT_OK;
}

/* files: read the data set (type checks, IDX headers, core/data's parse) as the trainer will;
 * otherwise the structure only (no file touched; model and layouts checked when the spec or the
 * dataset section fixes the input shape). */
static mt_code check_root(const mt_jobspec *js, const mt_jobspec_opts *o, bool files,
                          mt_jobspec_summary *s, mt_err *err)
{
    const cJSON *root = js->root, *ds = js->dataset, *mj;
    const mt_job_spec *spec = js->model;
    bool pipeline = uses_pipeline_form(ds);
    mt_mesh *mesh = NULL;
    mt_code rc;

    snprintf(s->name, sizeof(s->name), "%s", spec->name);
    s->batch_size = spec->batch_size;
    s->epochs = spec->epochs;
    s->steps = spec->steps;
    s->input_rank = spec->input_rank;
    memcpy(s->input_shape, spec->input_shape, sizeof(s->input_shape));
    if (pipeline && is_synthetic(ds))
        rc = synthetic_probe(spec, ds, s, err);
    else if (!files)
        rc = structure_probe(js, o, s, err);
    else if ((rc = mt_jobspec_check_files(js, o->base_dir, NULL, err)) == MT_OK)
        rc = pipeline ? data_probe(ds, o->base_dir, s, err)
                      : idx_probe(&spec->dataset, o->base_dir, s, err);
    if (rc != MT_OK)
        goto out;
    if (s->train_examples > 0) {
        s->steps_per_epoch = (s->train_examples + s->batch_size - 1) / s->batch_size;
        s->total_steps = s->epochs > 0 ? (uint64_t)s->epochs * s->steps_per_epoch : 0;
    }
    if (s->steps > 0 && (s->total_steps == 0 || (uint64_t)s->steps < s->total_steps))
        s->total_steps = (uint64_t)s->steps;
    mj = cJSON_GetObjectItemCaseSensitive(root, "mesh");
    if (o->mesh != NULL) {
        if ((rc = mt_mesh_parse(o->mesh, NULL, 0, &mesh, err)) != MT_OK)
            mt_err_prefix(err, "--mesh");
    } else if (mj != NULL) {
        rc = mt_mesh_from_json(mj, "mesh", NULL, 0, &mesh, err);
    } else {
        const char *nm[] = {"batch"};
        int sz[] = {1};
        rc = mt_mesh_new(nm, sz, 1, NULL, 0, &mesh, err);
    }
    if (rc != MT_OK)
        goto out;
    mesh_summary(mesh, s);
    if (s->input_rank != 0 && (rc = check_params(js, mesh, o, s, err)) != MT_OK)
        goto out;
    if (files && s->input_rank != 0 &&
        (rc = loss_probe(spec, ds, pipeline, o->base_dir, s, err)) != MT_OK)
        goto out;
    rc = check_sections(root, s, err);
    if (rc == MT_OK && spec->reproducibility == MT_REPRO_MESH_INVARIANT) {
        rc = check_mesh_invariant(spec, mesh, js->cfg.layouts, s, err);
        s->repro_leaves = (uint32_t)mt_repro_leaves(spec->batch_size);
    }
out:
    mt_mesh_free(mesh);
    return rc;
}

mt_code mt_jobspec_validate(const char *json, size_t len, mt_jobspec_summary *out, mt_err *err)
{
    return mt_jobspec_validate_opts(json, len, NULL, out, err);
}

/* Parse json[0..len) once: the root and the typed sections (no file is opened). */
mt_code mt_jobspec_parse(const char *json, size_t len, mt_jobspec **out, mt_err *err)
{
    mt_jobspec *js;
    mt_code rc;

    *out = NULL;
    if (json == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "(root): no job spec");
    if (len > MT_JOBSPEC_MAX_SIZE)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "(root): job spec of %zu bytes exceeds the limit of %u bytes", len,
                          MT_JOBSPEC_MAX_SIZE);
    js = mt_calloc(1, sizeof(*js));
    if (js == NULL || (js->json = mt_malloc(len + 1)) == NULL) {
        mt_free(js);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job spec: out of memory");
    }
    memcpy(js->json, json, len);
    js->json[len] = '\0';
    js->len = len;
    js->root = cJSON_ParseWithLength(json, len);
    if (js->root == NULL) {
        /* mt_job_spec_parse words the syntax error (with the byte offset) */
        mt_job_spec *spec = NULL;
        rc = mt_job_spec_parse(json, len, &spec, err);
        mt_job_spec_free(spec);
        rc = rc != MT_OK ? rc : mt_err_set(err, MT_INVALID_ARGUMENT, "(root): not valid JSON");
        goto fail;
    }
    if (!cJSON_IsObject(js->root)) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "(root): the job spec must be a JSON object");
        goto fail;
    }
    js->dataset = cJSON_GetObjectItemCaseSensitive(js->root, "dataset");
    if ((rc = mt_job_spec_from_json(js->root, &js->model, err)) != MT_OK ||
        (rc = mt_spmd_config_from_json(js->root, &js->cfg, err)) != MT_OK)
        goto fail;
    *out = js;
    return MT_OK;
fail:
    mt_jobspec_free(js);
    return rc;
}

mt_code mt_jobspec_load(const char *path, mt_jobspec **out, mt_err *err)
{
    char dir[MT_SPEC_PATH_MAX], *buf, *abs = NULL, *real;
    size_t n, an;
    mt_code rc;

    *out = NULL;
    rc = mt_job_spec_read(path, MT_JOBSPEC_MAX_SIZE, &buf, &n, err);
    if (rc != MT_OK)
        return rc;
    /* the one rule: relative dataset paths are relative to the spec file's folder, made absolute
     * here so that a caller resolving them against that folder again finds the same files */
    snprintf(dir, sizeof(dir), "%s", path);
    const char *d = dirname(dir);
    real = realpath(d, NULL);
    rc = mt_jobspec_absolute_paths(buf, n, real != NULL ? real : d, &abs, &an, err);
    free(real);
    if (rc == MT_OK)
        rc = mt_jobspec_parse(abs, an, out, err);
    mt_free(abs);
    mt_free(buf);
    return rc;
}

void mt_jobspec_free(mt_jobspec *js)
{
    if (js == NULL)
        return;
    mt_spmd_config_fini(&js->cfg);
    mt_job_spec_free(js->model);
    cJSON_Delete(js->root);
    mt_free(js->json);
    mt_free(js);
}

mt_code mt_jobspec_check(const mt_jobspec *js, const mt_jobspec_opts *opts, mt_jobspec_summary *out,
                         mt_err *err)
{
    static const mt_jobspec_opts dflt = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    rc = check_root(js, opts != NULL ? opts : &dflt, true, out, err);
    if (rc != MT_OK)
        memset(out, 0, sizeof(*out));
    return rc;
}

mt_code mt_jobspec_validate_structure(const char *json, size_t len, const mt_jobspec_opts *opts,
                                      mt_jobspec_summary *out, mt_err *err)
{
    static const mt_jobspec_opts dflt = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_jobspec *js = NULL;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    rc = mt_jobspec_parse(json, len, &js, err);
    if (rc == MT_OK)
        rc = check_root(js, opts != NULL ? opts : &dflt, false, out, err);
    if (rc != MT_OK)
        memset(out, 0, sizeof(*out));
    mt_jobspec_free(js);
    return rc;
}

mt_code mt_jobspec_validate_opts(const char *json, size_t len, const mt_jobspec_opts *opts,
                                 mt_jobspec_summary *out, mt_err *err)
{
    mt_jobspec *js = NULL;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    rc = mt_jobspec_parse(json, len, &js, err);
    if (rc == MT_OK)
        rc = mt_jobspec_check(js, opts, out, err);
    mt_jobspec_free(js);
    return rc;
}
