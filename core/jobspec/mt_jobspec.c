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
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "layout/mt_layout.h"
#include "mesh/mt_mesh.h"
#include "model/mt_model.h"
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
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        int ok = 0;
        for (int i = 0; keys[i] != NULL && !ok; i++)
            ok = strcmp(it->string, keys[i]) == 0;
        if (!ok)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: unknown field", sect, it->string);
    }
    return MT_OK;
}

static mt_code check_sections(const cJSON *root, mt_jobspec_summary *s, mt_err *err)
{
    static const char *const ck_keys[] = {"every_steps", "keep", NULL};
    static const char *const rs_keys[] = {"max_restarts", NULL};
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
            (rc = get_uint(n, "max_restarts", "restart", 0, 1000, &s->max_restarts, err)) != MT_OK)
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
static mt_code idx_probe(const mt_dataset_spec *ds, mt_jobspec_summary *s, mt_err *err)
{
    unsigned char h[20];
    int dims;

    if (!read_head(ds->train_images, h, 8))
        return mt_err_set(err, MT_NOT_FOUND, "dataset.train_images: cannot read IDX file %s",
                          ds->train_images);
    dims = h[3];
    if (h[0] != 0 || h[1] != 0 || dims < 1 || dims > 4 ||
        !read_head(ds->train_images, h, 4 + 4 * dims))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset.train_images: %s is not an IDX file",
                          ds->train_images);
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
static mt_code check_params(const mt_jobspec *js, const mt_mesh *mesh, mt_jobspec_summary *s,
                            mt_err *err)
{
    const mt_job_spec *spec = js->model;
    mt_model *model = NULL;
    mt_spmd_plan_info info;
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
    for (int k = 0; k < info.ndims && k < MT_JOBSPEC_MAX_DIMS; k++)
        s->comm_bytes_per_step[k] = info.comm_bytes[k];
out:
    mt_model_free(model);
    return rc;
}

static mt_code check_root(const mt_jobspec *js, const mt_jobspec_opts *o, mt_jobspec_summary *s,
                          mt_err *err)
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
    else
        rc = pipeline ? data_probe(ds, o->base_dir, s, err) : idx_probe(&spec->dataset, s, err);
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
    if ((rc = check_params(js, mesh, s, err)) != MT_OK)
        goto out;
    rc = check_sections(root, s, err);
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
    char *buf;
    size_t n;
    mt_code rc;

    *out = NULL;
    rc = mt_job_spec_read(path, MT_JOBSPEC_MAX_SIZE, &buf, &n, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_jobspec_parse(buf, n, out, err);
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
    rc = check_root(js, opts != NULL ? opts : &dflt, out, err);
    if (rc != MT_OK)
        memset(out, 0, sizeof(*out));
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
