/* SPDX-License-Identifier: MIT */
/*
 * spec.c — job spec parsing and validation (contract in mt_model.h).
 *
 * Every field is read through a helper that knows its JSON path, so each refusal reads
 * "<path>: <why>". Unknown keys are refused except the ones other modules own.
 * Threading: none shared. Tests: tests/unit/test_model.c, tests/fuzz/fuzz_spec.c.
 */
#include "layers/mt_layer.h"
#include "model/mt_model.h"
#include "model/mt_model_fields.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist/"

mt_code mt_model_field_bad(mt_err *err, const char *path, const char *why)
{
    return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: %s", path, why);
}

/* Refuse keys of obj not in `allowed` (NULL-terminated). */
static mt_code check_keys(const cJSON *obj, const char *path, const char *const *allowed,
                          mt_err *err)
{
    const cJSON *it;
    size_t n = 0;

    while (allowed[n] != NULL)
        n++;
    cJSON_ArrayForEach(it, obj)
    {
        bool ok = false;
        for (const char *const *a = allowed; *a != NULL; a++)
            ok = ok || strcmp(*a, it->string) == 0;
        if (!ok) {
            const char *near = mt_status_suggest(it->string, allowed, n);
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s%s%s: unknown field%s%s%s", path,
                              path[0] ? "." : "", it->string, near ? "; did you mean " : "",
                              near ? near : "", near ? "?" : "");
        }
    }
    return MT_OK;
}

/* A positive integer at path (<= max), or the default when absent. */
mt_code mt_model_field_pos_int(const cJSON *obj, const char *key, const char *path, int64_t max,
                               int64_t dflt, int64_t *out, mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    double v;
    *out = dflt;
    if (n == NULL)
        return MT_OK;
    v = cJSON_IsNumber(n) ? n->valuedouble : -1.0;
    if (!cJSON_IsNumber(n) || v != floor(v) || v < 1.0 || v > (double)max) {
        char why[96];
        snprintf(why, sizeof(why), "must be a positive integer (at most %lld)", (long long)max);
        return mt_model_field_bad(err, path, why);
    }
    *out = (int64_t)v;
    return MT_OK;
}

/* A finite number in [lo, hi] (hi_open: < hi) at path, or the default when absent. */
mt_code mt_model_field_num(const cJSON *obj, const char *key, const char *path, double lo,
                           double hi, bool lo_open, bool hi_open, float dflt, float *out,
                           mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    double v;
    *out = dflt;
    if (n == NULL)
        return MT_OK;
    v = cJSON_IsNumber(n) ? n->valuedouble : NAN;
    if (!cJSON_IsNumber(n) || !isfinite(v) || v < lo || v > hi || (lo_open && v == lo) ||
        (hi_open && v == hi)) {
        char why[96];
        snprintf(why, sizeof(why), "must be a number in %c%g, %g%c", lo_open ? '(' : '[', lo, hi,
                 hi_open ? ')' : ']');
        return mt_model_field_bad(err, path, why);
    }
    *out = (float)v;
    return MT_OK;
}

mt_code mt_model_field_bool(const cJSON *obj, const char *key, const char *path, bool dflt,
                            bool *out, mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = dflt;
    if (n == NULL)
        return MT_OK;
    if (!cJSON_IsBool(n))
        return mt_model_field_bad(err, path, "must be true or false");
    *out = cJSON_IsTrue(n);
    return MT_OK;
}

/* A string member (NULL when absent); a present non-string is refused. */
mt_code mt_model_field_str(const cJSON *obj, const char *key, const char *path, const char **out,
                           mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (n == NULL)
        return MT_OK;
    if (!cJSON_IsString(n))
        return mt_model_field_bad(err, path, "must be a string");
    *out = n->valuestring;
    return MT_OK;
}

static mt_code copy_path(char *dst, size_t cap, const char *src, const char *path, mt_err *err)
{
    if (src[0] == '\0')
        return mt_model_field_bad(err, path, "must not be empty");
    if (strlen(src) >= cap)
        return mt_model_field_bad(err, path, "path too long");
    memcpy(dst, src, strlen(src) + 1);
    return MT_OK;
}

mt_code mt_job_spec_parse_dataset(const struct cJSON *node, mt_dataset_spec *out, mt_err *err)
{
    /* the input pipeline's options (core/data validates them) are accepted beside the files */
    static const char *const keys[] = {"format",
                                       "train_images",
                                       "train_labels",
                                       "test_images",
                                       "test_labels",
                                       "shard_policy",
                                       "batching",
                                       "drop_remainder",
                                       "shuffle_buffer",
                                       "prefetch",
                                       NULL};
    static const char *const fields[] = {"train_images", "train_labels", "test_images",
                                         "test_labels"};
    char *dsts[4] = {out->train_images, out->train_labels, out->test_images, out->test_labels};
    static const char *const dflt[] = {
        FMNIST_DIR "train-images-idx3-ubyte.gz", FMNIST_DIR "train-labels-idx1-ubyte.gz",
        FMNIST_DIR "t10k-images-idx3-ubyte.gz", FMNIST_DIR "t10k-labels-idx1-ubyte.gz"};
    const char *s;
    char path[64];
    mt_code rc;

    memset(out, 0, sizeof(*out));
    memcpy(out->format, "idx", 4);
    for (int i = 0; i < 4; i++)
        memcpy(dsts[i], dflt[i], strlen(dflt[i]) + 1);
    if (node == NULL)
        return MT_OK;
    if (!cJSON_IsObject(node))
        return mt_model_field_bad(err, "dataset", "must be an object");
    rc = mt_model_field_str(node, "format", "dataset.format", &s, err);
    if (rc != MT_OK)
        return rc;
    if (s != NULL && (strcmp(s, "text") == 0 || strcmp(s, "synthetic") == 0 ||
                      strcmp(s, "csv") == 0 || strcmp(s, "npy") == 0 || strcmp(s, "npz") == 0 ||
                      strcmp(s, "images") == 0 || strcmp(s, "tokens") == 0)) {
        /* read by the SPMD trainer (core/spmd), which validates the rest of the section */
        snprintf(out->format, sizeof(out->format), "%s", s);
        return MT_OK;
    }
    if ((s == NULL || strcmp(s, "idx") == 0) &&
        cJSON_GetObjectItemCaseSensitive(node, "train") != NULL)
        return MT_OK; /* the input pipeline's form of IDX files: core/data validates it */
    if (s != NULL && strcmp(s, "idx") != 0)
        return mt_model_field_bad(err, "dataset.format",
                                  "must be \"idx\" (or \"csv\", \"npy\", \"npz\", \"images\", "
                                  "\"text\", \"tokens\", \"synthetic\")");
    rc = check_keys(node, "dataset", keys, err);
    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "dataset.%s", fields[i]);
        rc = mt_model_field_str(node, fields[i], path, &s, err);
        if (rc == MT_OK && s != NULL)
            rc = copy_path(dsts[i], MT_SPEC_PATH_MAX, s, path, err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

/* "optimizer.schedule": {"type": ..., "warmup_steps", "decay_steps", "decay_rate", "alpha",
 * "staircase"}. */
static mt_code parse_schedule(const cJSON *obj, mt_lr_schedule *s, mt_err *err)
{
    static const char *const keys[] = {"type",  "warmup_steps", "decay_steps", "decay_rate",
                                       "alpha", "staircase",    NULL};
    static const char *const names[] = {"constant", "step", "exponential", "cosine"};
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, "schedule");
    const char *type = NULL;
    int64_t v;
    mt_code rc;

    memset(s, 0, sizeof(*s));
    if (n == NULL)
        return MT_OK;
    if (!cJSON_IsObject(n))
        return mt_model_field_bad(err, "optimizer.schedule", "must be an object with a type");
    if ((rc = check_keys(n, "optimizer.schedule", keys, err)) != MT_OK ||
        (rc = mt_model_field_str(n, "type", "optimizer.schedule.type", &type, err)) != MT_OK)
        return rc;
    for (size_t i = 0; type != NULL && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(type, names[i]) == 0)
            s->kind = (mt_schedule_kind)i, type = "";
    if (type == NULL || type[0] != '\0')
        return mt_model_field_bad(err, "optimizer.schedule.type",
                                  "must be \"constant\", \"step\", \"exponential\" or \"cosine\"");
    rc = mt_model_field_pos_int(n, "warmup_steps", "optimizer.schedule.warmup_steps",
                                (int64_t)1 << 40, 0, &s->warmup_steps, err);
    if (rc == MT_OK && s->kind != MT_SCHED_CONSTANT) {
        if (cJSON_GetObjectItemCaseSensitive(n, "decay_steps") == NULL)
            return mt_model_field_bad(err, "optimizer.schedule.decay_steps",
                                      "is required for this schedule");
        rc = mt_model_field_pos_int(n, "decay_steps", "optimizer.schedule.decay_steps",
                                    (int64_t)1 << 40, 1, &v, err);
        s->decay_steps = v;
    }
    if (rc == MT_OK && (s->kind == MT_SCHED_STEP || s->kind == MT_SCHED_EXPONENTIAL))
        rc = mt_model_field_num(n, "decay_rate", "optimizer.schedule.decay_rate", 0, 1, true, false,
                                0.5f, &s->decay_rate, err);
    if (rc == MT_OK && s->kind == MT_SCHED_COSINE)
        rc = mt_model_field_num(n, "alpha", "optimizer.schedule.alpha", 0, 1, false, false, 0.0f,
                                &s->alpha, err);
    if (rc == MT_OK)
        rc = mt_model_field_bool(n, "staircase", "optimizer.schedule.staircase", false,
                                 &s->staircase, err);
    return rc;
}

static mt_code parse_optimizer(const cJSON *root, mt_optimizer_spec *o, mt_err *err)
{
    static const char *const keys[] = {"name",     "learning_rate",
                                       "momentum", "nesterov",
                                       "beta_1",   "beta_2",
                                       "epsilon",  "weight_decay",
                                       "rho",      "initial_accumulator_value",
                                       "schedule", "global_clipnorm",
                                       NULL};
    static const struct {
        const char *name;
        mt_optimizer_kind kind;
        float lr;
    } kinds[] = {{"sgd", MT_OPT_SGD, 0.01f},
                 {"adam", MT_OPT_ADAM, 0.001f},
                 {"adamw", MT_OPT_ADAMW, 0.001f},
                 {"rmsprop", MT_OPT_RMSPROP, 0.001f},
                 {"adagrad", MT_OPT_ADAGRAD, 0.001f}};
    const char *names = "\"sgd\", \"adam\", \"adamw\", \"rmsprop\" or \"adagrad\"";
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    const cJSON *obj = NULL;
    const char *name = "adam";
    size_t k;
    mt_code rc;
    float lr;
    char why[128];

    if (n != NULL && cJSON_IsString(n)) {
        name = n->valuestring;
    } else if (n != NULL && cJSON_IsObject(n)) {
        obj = n;
        rc = check_keys(obj, "optimizer", keys, err);
        if (rc != MT_OK)
            return rc;
        rc = mt_model_field_str(obj, "name", "optimizer.name", &name, err);
        if (rc != MT_OK)
            return rc;
        if (name == NULL) {
            snprintf(why, sizeof(why), "is required (%s)", names);
            return mt_model_field_bad(err, "optimizer.name", why);
        }
    } else if (n != NULL) {
        snprintf(why, sizeof(why), "must be %s or an object with a name", names);
        return mt_model_field_bad(err, "optimizer", why);
    }
    memset(o, 0, sizeof(*o));
    for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        if (strcmp(name, kinds[k].name) == 0)
            break;
    if (k == sizeof(kinds) / sizeof(kinds[0])) {
        snprintf(why, sizeof(why), "must be %s", names);
        return mt_model_field_bad(err, obj != NULL ? "optimizer.name" : "optimizer", why);
    }
    o->kind = kinds[k].kind;
    o->learning_rate = kinds[k].lr;
    o->beta1 = 0.9f, o->beta2 = 0.999f, o->epsilon = 1e-7f;
    o->weight_decay = o->kind == MT_OPT_ADAMW ? 0.004f : 0.0f; /* Keras: sgd 0, adamw 0.004 */
    o->rho = 0.9f, o->initial_accumulator = 0.1f;
    rc = mt_model_field_num(root, "learning_rate", "learning_rate", 0, 1e3, true, false,
                            o->learning_rate, &o->learning_rate, err);
    if (rc != MT_OK || obj == NULL)
        return rc;
    lr = o->learning_rate;
    rc = mt_model_field_num(obj, "learning_rate", "optimizer.learning_rate", 0, 1e3, true, false,
                            lr, &o->learning_rate, err);
    /* a field of another optimizer is refused, naming the one it belongs to */
    {
        static const struct {
            const char *key, *owner;
            unsigned kinds; /* bit per mt_optimizer_kind */
        } own[] = {{"momentum", "sgd", 1u << MT_OPT_SGD},
                   {"nesterov", "sgd", 1u << MT_OPT_SGD},
                   {"beta_1", "adam and adamw", (1u << MT_OPT_ADAM) | (1u << MT_OPT_ADAMW)},
                   {"beta_2", "adam and adamw", (1u << MT_OPT_ADAM) | (1u << MT_OPT_ADAMW)},
                   {"weight_decay", "sgd and adamw", (1u << MT_OPT_SGD) | (1u << MT_OPT_ADAMW)},
                   {"rho", "rmsprop", 1u << MT_OPT_RMSPROP},
                   {"initial_accumulator_value", "adagrad", 1u << MT_OPT_ADAGRAD}};
        for (size_t i = 0; rc == MT_OK && i < sizeof(own) / sizeof(own[0]); i++)
            if (!(own[i].kinds & (1u << o->kind)) &&
                cJSON_GetObjectItemCaseSensitive(obj, own[i].key) != NULL) {
                char p[64];
                snprintf(p, sizeof(p), "optimizer.%s", own[i].key);
                snprintf(why, sizeof(why), "only applies to %s", own[i].owner);
                rc = mt_model_field_bad(err, p, why);
            }
    }
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "momentum", "optimizer.momentum", 0, 1, false, true, 0.0f,
                                &o->momentum, err);
    if (rc == MT_OK)
        rc = mt_model_field_bool(obj, "nesterov", "optimizer.nesterov", false, &o->nesterov, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "beta_1", "optimizer.beta_1", 0, 1, false, true, 0.9f,
                                &o->beta1, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "beta_2", "optimizer.beta_2", 0, 1, false, true, 0.999f,
                                &o->beta2, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "epsilon", "optimizer.epsilon", 0, 1, true, false, 1e-7f,
                                &o->epsilon, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "weight_decay", "optimizer.weight_decay", 0, 1, false, false,
                                o->weight_decay, &o->weight_decay, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "rho", "optimizer.rho", 0, 1, false, true, 0.9f, &o->rho, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "initial_accumulator_value",
                                "optimizer.initial_accumulator_value", 0, 1e3, false, false, 0.1f,
                                &o->initial_accumulator, err);
    if (rc == MT_OK)
        rc = mt_model_field_num(obj, "global_clipnorm", "optimizer.global_clipnorm", 0, 1e9, true,
                                false, 0.0f, &o->global_clipnorm, err);
    if (rc == MT_OK)
        rc = parse_schedule(obj, &o->schedule, err);
    return rc;
}

mt_code mt_model_field_activation(const cJSON *l, const char *path, mt_activation *a, mt_err *err)
{
    static const struct {
        const char *name;
        mt_activation act;
    } acts[] = {{"linear", MT_ACT_LINEAR},
                {"relu", MT_ACT_RELU},
                {"softmax", MT_ACT_SOFTMAX},
                {"gelu", MT_ACT_GELU},
                {"tanh", MT_ACT_TANH},
                {"sigmoid", MT_ACT_SIGMOID},
                {"leaky_relu", MT_ACT_LEAKY_RELU}};
    const char *s;
    mt_code rc = mt_model_field_str(l, "activation", path, &s, err);
    *a = MT_ACT_LINEAR;
    if (rc != MT_OK || s == NULL)
        return rc;
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++)
        if (strcmp(s, acts[i].name) == 0) {
            *a = acts[i].act;
            return MT_OK;
        }
    return mt_model_field_bad(err, path,
                              "must be \"relu\", \"gelu\", \"tanh\", \"sigmoid\", "
                              "\"leaky_relu\", \"softmax\" or \"linear\"");
}

/* kernel_size: an integer k (k x k) or [kh, kw]. pool_size: 2 or [2, 2] only. */
mt_code mt_model_field_pair(const cJSON *l, const char *key, const char *path, size_t *a, size_t *b,
                            bool required, mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(l, key);
    const char *why = "must be a positive integer or a list of two positive integers";
    if (n == NULL) {
        if (required)
            return mt_model_field_bad(err, path, "is required");
        return MT_OK;
    }
    if (cJSON_IsNumber(n)) {
        double v = n->valuedouble;
        if (v != floor(v) || v < 1 || v > 1024)
            return mt_model_field_bad(err, path, why);
        *a = *b = (size_t)v;
        return MT_OK;
    }
    if (!cJSON_IsArray(n) || cJSON_GetArraySize(n) != 2)
        return mt_model_field_bad(err, path, why);
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(n, i);
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v != floor(v) || v < 1 || v > 1024)
            return mt_model_field_bad(err, path, why);
        *(i == 0 ? a : b) = (size_t)v;
    }
    return MT_OK;
}

/* check_keys over a layer type's own keys plus "type", "name" and "inputs", which every layer
 * takes. */
static mt_code check_layer_keys(const cJSON *l, const char *base, const char *const *keys,
                                mt_err *err)
{
    const char *all[20] = {"type", "name", "inputs"};
    int n = 3;
    while (keys[n - 3] != NULL && n < 19) {
        all[n] = keys[n - 3];
        n++;
    }
    all[n] = NULL;
    return check_keys(l, base, all, err);
}

/* "name": 1..31 characters of [A-Za-z0-9_-], not starting with a digit or '-' (weights are
 * "<name>.kernel", so no '.'). Absent leaves out empty. */
static mt_code parse_layer_name(const cJSON *l, const char *base, char *out, mt_err *err)
{
    char path[112];
    const char *v;
    size_t n;
    mt_code rc;

    snprintf(path, sizeof(path), "%s.name", base);
    rc = mt_model_field_str(l, "name", path, &v, err);
    if (rc != MT_OK || v == NULL)
        return rc;
    n = strlen(v);
    if (n < 1 || n >= MT_LAYER_NAME_MAX)
        return mt_model_field_bad(err, path, "must be 1 to 31 characters");
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (i > 0 && ((c >= '0' && c <= '9') || c == '-'));
        if (!ok)
            return mt_model_field_bad(
                err, path, "must be letters, digits, '_' or '-', starting with a letter or '_'");
    }
    memcpy(out, v, n + 1);
    return MT_OK;
}

static mt_code parse_layer(const cJSON *l, int idx, mt_layer_spec *out, mt_err *err)
{
    char base[48], path[96];
    const mt_layer_ops *ops;
    const cJSON *t;
    mt_code rc;

    snprintf(base, sizeof(base), "model.layers[%d]", idx);
    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(l))
        return mt_model_field_bad(err, base, "must be an object");
    snprintf(path, sizeof(path), "%s.type", base);
    t = cJSON_GetObjectItemCaseSensitive(l, "type");
    if (t == NULL)
        return mt_model_field_bad(err, path, "is required");
    if (!cJSON_IsString(t))
        return mt_model_field_bad(err, path, "must be a string");
    if ((ops = mt_layer_ops_find(t->valuestring)) == NULL) {
        char names[256];
        mt_layer_type_names(names, sizeof(names));
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: must be one of %s", path, names);
    }
    rc = check_layer_keys(l, base, ops->keys, err);
    if (rc == MT_OK)
        rc = parse_layer_name(l, base, out->name, err);
    if (rc != MT_OK)
        return rc;
    out->kind = ops->kind;
    out->use_bias = true;
    return ops->parse(l, base, out, err);
}

/* Whether a layer other than layer i is called name. */
static bool name_taken_other(const mt_job_spec *s, int i, const char *name)
{
    for (int j = 0; j < s->n_layers; j++)
        if (j != i && strcmp(s->layers[j].name, name) == 0)
            return true;
    return false;
}

/* Keras-style default names for unnamed layers: "<type>_N" counting that type's unnamed layers
 * from 1 in order, skipping a number whose name a named layer already has. */
static void assign_default_names(mt_job_spec *s)
{
    int next[MT_LAYER_KIND_COUNT] = {0};
    for (int i = 0; i < s->n_layers; i++) {
        mt_layer_spec *l = &s->layers[i];
        if (l->name[0] != '\0')
            continue;
        do
            snprintf(l->name, sizeof(l->name), "%s_%d", mt_layer_ops_of(l->kind)->type,
                     ++next[l->kind]);
        while (name_taken_other(s, i, l->name));
    }
}

/*
 * "inputs": a list of earlier layers' names ("input" is the model's input); default the previous
 * layer. add and concatenate need 2..MT_LAYER_MAX_INPUTS, every other layer exactly one.
 */
static mt_code parse_inputs(const cJSON *l, int idx, mt_job_spec *s, mt_err *err)
{
    mt_layer_spec *o = &s->layers[idx];
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(l, "inputs"), *e;
    const mt_layer_ops *ops = mt_layer_ops_of(o->kind);
    bool join = ops->max_inputs > 1;
    char path[96];
    int k = 0;

    snprintf(path, sizeof(path), "model.layers[%d].inputs", idx);
    if (in == NULL) {
        if (join)
            return mt_model_field_bad(
                err, path, "is required for add and concatenate (2 or more layer names)");
        o->n_inputs = 1;
        o->inputs[0] = idx - 1; /* layer 0: MT_LAYER_INPUT */
        return MT_OK;
    }
    if (!cJSON_IsArray(in))
        return mt_model_field_bad(err, path, "must be a list of layer names");
    cJSON_ArrayForEach(e, in)
    {
        int j = -2;
        char ep[112];
        snprintf(ep, sizeof(ep), "%s[%d]", path, k);
        if (!cJSON_IsString(e))
            return mt_model_field_bad(err, ep, "must be a layer name (a string)");
        if (k == MT_LAYER_MAX_INPUTS)
            return mt_model_field_bad(err, path, "at most 8 inputs");
        if (strcmp(e->valuestring, "input") == 0)
            j = MT_LAYER_INPUT;
        for (int q = 0; q < s->n_layers && j == -2; q++)
            if (strcmp(s->layers[q].name, e->valuestring) == 0)
                j = q;
        if (j == -2 || j >= idx) {
            char why[160];
            snprintf(why, sizeof(why), "\"%.40s\" is %s", e->valuestring,
                     j == -2 ? "not the name of a layer (nor \"input\")"
                             : "not an earlier layer (layers run in list order)");
            return mt_model_field_bad(err, ep, why);
        }
        o->inputs[k++] = j;
    }
    o->n_inputs = k;
    if (join && k < 2)
        return mt_model_field_bad(err, path, "add and concatenate need 2 or more inputs");
    if (!join && k != 1)
        return mt_model_field_bad(err, path, "must name exactly one layer");
    return MT_OK;
}

/*
 * "tied_to" of layer idx (a dense layer): the name of an earlier embedding layer that no other
 * layer ties to; its table is the layer's kernel (core/layers/dense.c).
 */
static mt_code resolve_tied(mt_job_spec *s, int idx, mt_err *err)
{
    mt_layer_spec *o = &s->layers[idx];
    char path[96], why[160];
    int j = -1;

    if (!o->tied)
        return MT_OK;
    snprintf(path, sizeof(path), "model.layers[%d].tied_to", idx);
    for (int q = 0; q < s->n_layers && j < 0; q++)
        if (strcmp(s->layers[q].name, o->tied_name) == 0)
            j = q;
    if (j < 0 || j >= idx) {
        snprintf(why, sizeof(why), "\"%.40s\" is %s", o->tied_name,
                 j < 0 ? "not the name of a layer"
                       : "not an earlier layer (an embedding before the head)");
        return mt_model_field_bad(err, path, why);
    }
    if (s->layers[j].kind != MT_LAYER_EMBEDDING) {
        snprintf(why, sizeof(why),
                 "\"%.40s\" is a %s layer; only an embedding's table can be a "
                 "head's kernel",
                 o->tied_name, mt_layer_ops_of(s->layers[j].kind)->type);
        return mt_model_field_bad(err, path, why);
    }
    for (int q = j + 1; q < idx; q++)
        if (s->layers[q].tied && s->layers[q].tied_to == j) {
            snprintf(why, sizeof(why), "\"%.40s\" is already tied to by model.layers[%d] (%s)",
                     o->tied_name, q, s->layers[q].name);
            return mt_model_field_bad(err, path, why);
        }
    o->tied_to = j;
    return MT_OK;
}

int mt_job_spec_consumers(const mt_job_spec *spec, int i)
{
    int n = i == spec->n_layers - 1;
    for (int j = i + 1; j < spec->n_layers; j++)
        for (int k = 0; k < spec->layers[j].n_inputs; k++)
            n += spec->layers[j].inputs[k] == i;
    return n;
}

bool mt_job_spec_output_shared(const mt_job_spec *spec, int i)
{
    if (mt_job_spec_consumers(spec, i) > 1)
        return true;
    for (int j = i + 1; j < spec->n_layers; j++)
        for (int k = 0; k < spec->layers[j].n_inputs; k++)
            if (spec->layers[j].inputs[k] == i &&
                mt_layer_ops_of(spec->layers[j].kind)->max_inputs > 1)
                return true;
    return false;
}

static int shape_text(char *buf, size_t cap, int rank, const size_t *shape)
{
    int o = 0;
    for (int a = 0; a < rank; a++)
        o += snprintf(buf + o, cap - (size_t)o, a ? ", %zu" : "%zu", shape[a]);
    return o;
}

mt_code mt_layer_join_shape(const mt_layer_spec *l, int idx, const int *ranks,
                            const size_t (*shapes)[3], int *out_rank, size_t *out_shape,
                            mt_err *err)
{
    int r = ranks[0];
    *out_rank = r;
    memcpy(out_shape, shapes[0], 3 * sizeof(size_t));
    for (int k = 1; k < l->n_inputs; k++) {
        bool same = ranks[k] == r;
        for (int a = 0; same && a < r; a++)
            same = shapes[k][a] == shapes[0][a] || (l->kind == MT_LAYER_CONCATENATE && a == r - 1);
        if (!same) {
            char s0[64], sk[64];
            shape_text(s0, sizeof(s0), r, shapes[0]);
            shape_text(sk, sizeof(sk), ranks[k], shapes[k]);
            return mt_err_set(
                err, MT_INVALID_ARGUMENT, "model.layers[%d] (%s): input shapes (%s) and (%s) %s",
                idx, l->name, s0, sk,
                l->kind == MT_LAYER_ADD ? "differ" : "differ on more than the last axis");
        }
        if (l->kind == MT_LAYER_CONCATENATE)
            out_shape[r - 1] += shapes[k][r - 1];
    }
    return MT_OK;
}

static mt_code parse_model(const cJSON *root, mt_job_spec *s, mt_err *err)
{
    static const char *const keys[] = {"input_shape", "layers", NULL};
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *layers, *shape;
    mt_code rc;

    if (m == NULL)
        return mt_model_field_bad(err, "model", "is required");
    if (!cJSON_IsObject(m))
        return mt_model_field_bad(err, "model", "must be an object");
    rc = check_keys(m, "model", keys, err);
    if (rc != MT_OK)
        return rc;
    shape = cJSON_GetObjectItemCaseSensitive(m, "input_shape");
    if (shape != NULL) {
        int n = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
        if (n < 1 || n > 3)
            return mt_model_field_bad(err, "model.input_shape",
                                      "must be a list of 1 to 3 positive integers");
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(shape, i);
            double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (v != floor(v) || v < 1 || v > (1 << 24)) {
                char p[48];
                snprintf(p, sizeof(p), "model.input_shape[%d]", i);
                return mt_model_field_bad(err, p, "must be a positive integer");
            }
            s->input_shape[i] = (size_t)v;
        }
        s->input_rank = n;
    }
    layers = cJSON_GetObjectItemCaseSensitive(m, "layers");
    if (layers == NULL)
        return mt_model_field_bad(err, "model.layers", "is required");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1)
        return mt_model_field_bad(err, "model.layers", "must be a non-empty list of layers");
    s->n_layers = cJSON_GetArraySize(layers);
    if (s->n_layers > 256)
        return mt_model_field_bad(err, "model.layers", "at most 256 layers");
    s->layers = mt_calloc((size_t)s->n_layers, sizeof(*s->layers));
    if (s->layers == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model.layers: out of memory");
    for (int i = 0; i < s->n_layers; i++) {
        rc = parse_layer(cJSON_GetArrayItem(layers, i), i, &s->layers[i], err);
        if (rc != MT_OK)
            return rc;
        for (int j = 0; j < i && s->layers[i].name[0] != '\0'; j++)
            if (strcmp(s->layers[j].name, s->layers[i].name) == 0) {
                char p[64], why[96];
                snprintf(p, sizeof(p), "model.layers[%d].name", i);
                snprintf(why, sizeof(why), "\"%s\" is already the name of model.layers[%d]",
                         s->layers[i].name, j);
                return mt_model_field_bad(err, p, why);
            }
        if (s->layers[i].activation == MT_ACT_SOFTMAX && i != s->n_layers - 1) {
            char p[64];
            snprintf(p, sizeof(p), "model.layers[%d].activation", i);
            return mt_model_field_bad(err, p, "softmax is only supported on the last layer");
        }
    }
    assign_default_names(s);
    for (int i = 0; i < s->n_layers; i++) {
        rc = parse_inputs(cJSON_GetArrayItem(layers, i), i, s, err);
        if (rc != MT_OK)
            return rc;
    }
    for (int i = 0; i < s->n_layers; i++) {
        rc = resolve_tied(s, i, err);
        if (rc != MT_OK)
            return rc;
    }
    for (int i = 0; i + 1 < s->n_layers; i++)
        if (mt_job_spec_consumers(s, i) == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d] (%s): its output is used by no layer (only the "
                              "last layer may be the model's output)",
                              i, s->layers[i].name);
    return MT_OK;
}

/* "fsdp": {"reshard_after_forward": bool} (default true). */
static mt_code parse_fsdp(const cJSON *root, mt_job_spec *s, mt_err *err)
{
    static const char *const keys[] = {"reshard_after_forward", NULL};
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "fsdp");
    mt_code rc;

    s->fsdp_reshard_after_forward = true;
    if (f == NULL)
        return MT_OK;
    if (!cJSON_IsObject(f))
        return mt_model_field_bad(err, "fsdp", "must be an object");
    rc = check_keys(f, "fsdp", keys, err);
    if (rc != MT_OK)
        return rc;
    return mt_model_field_bool(f, "reshard_after_forward", "fsdp.reshard_after_forward", true,
                               &s->fsdp_reshard_after_forward, err);
}

/* "reproducibility": "fixed_mesh" (default) or "mesh_invariant"; a near miss is named. */
static mt_code parse_reproducibility(const cJSON *root, mt_reproducibility *out, mt_err *err)
{
    static const char *const modes[] = {"fixed_mesh", "mesh_invariant"};
    const char *str, *near;
    mt_code rc = mt_model_field_str(root, "reproducibility", "reproducibility", &str, err);

    *out = MT_REPRO_FIXED_MESH;
    if (rc != MT_OK || str == NULL)
        return rc;
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        if (strcmp(str, modes[i]) == 0) {
            *out = (mt_reproducibility)i;
            return MT_OK;
        }
    near = mt_status_suggest(str, modes, sizeof(modes) / sizeof(modes[0]));
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "reproducibility: unknown mode \"%s\"%s%s%s (\"fixed_mesh\" or "
                      "\"mesh_invariant\")",
                      str, near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
}

static mt_code parse_root(const cJSON *root, mt_job_spec *s, mt_err *err)
{
    static const char *const keys[] = {
        "name",          "seed",       "batch_size", "epochs",          "steps",     "optimizer",
        "learning_rate", "loss",       "dataset",    "model",           "mesh",      "layouts",
        "input_layout",  "checkpoint", "restart",    "elastic",         "init_from", "fsdp",
        "digest_every",  "metrics",    "validation", "reproducibility", NULL};
    const cJSON *n;
    const char *str;
    int64_t v;
    mt_code rc;

    if (!cJSON_IsObject(root))
        return mt_model_field_bad(err, "(root)", "the job spec must be a JSON object");
    rc = check_keys(root, "", keys, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_model_field_str(root, "name", "name", &str, err);
    if (rc != MT_OK)
        return rc;
    if (str != NULL)
        snprintf(s->name, sizeof(s->name), "%s", str);
    n = cJSON_GetObjectItemCaseSensitive(root, "seed");
    s->seed = 42;
    if (n != NULL) {
        double d = cJSON_IsNumber(n) ? n->valuedouble : -1;
        if (d != floor(d) || d < 0 || d > 9007199254740991.0)
            return mt_model_field_bad(err, "seed", "must be a non-negative integer");
        s->seed = (uint64_t)d;
    }
    rc = mt_model_field_pos_int(root, "batch_size", "batch_size", 1 << 20, 32, &v, err);
    if (rc != MT_OK)
        return rc;
    s->batch_size = (size_t)v;
    rc = mt_model_field_pos_int(root, "epochs", "epochs", 1000000, 0, &s->epochs, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_model_field_pos_int(root, "steps", "steps", (int64_t)1 << 40, 0, &s->steps, err);
    if (rc != MT_OK)
        return rc;
    if (s->epochs == 0 && s->steps == 0)
        s->epochs = 1;
    rc = mt_model_field_pos_int(root, "digest_every", "digest_every", (int64_t)1 << 40, 0,
                                &s->digest_every, err);
    if (rc != MT_OK)
        return rc;
    rc = parse_reproducibility(root, &s->reproducibility, err);
    if (rc != MT_OK)
        return rc;
    rc = parse_optimizer(root, &s->optimizer, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_loss_spec_parse(cJSON_GetObjectItemCaseSensitive(root, "loss"),
                            cJSON_GetObjectItemCaseSensitive(root, "metrics"), &s->loss, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_loss_validation_parse(cJSON_GetObjectItemCaseSensitive(root, "validation"), &s->loss,
                                  &s->validation, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_job_spec_parse_dataset(cJSON_GetObjectItemCaseSensitive(root, "dataset"), &s->dataset,
                                   err);
    if (rc != MT_OK)
        return rc;
    rc = parse_fsdp(root, s, err);
    if (rc != MT_OK)
        return rc;
    return parse_model(root, s, err);
}

mt_code mt_job_spec_from_json(const cJSON *root, mt_job_spec **out, mt_err *err)
{
    mt_job_spec *s;
    mt_code rc;

    *out = NULL;
    s = mt_calloc(1, sizeof(*s));
    if (s == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job spec: out of memory");
    rc = parse_root(root, s, err);
    if (rc != MT_OK) {
        mt_job_spec_free(s);
        return rc;
    }
    *out = s;
    return MT_OK;
}

mt_code mt_job_spec_parse(const char *json, size_t len, mt_job_spec **out, mt_err *err)
{
    cJSON *root;
    mt_code rc;

    *out = NULL;
    root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at != NULL && at >= json && at <= json + len ? (size_t)(at - json) : 0;
        return mt_err_set(err, MT_INVALID_ARGUMENT, "(root): not valid JSON (near byte %zu)", off);
    }
    rc = mt_job_spec_from_json(root, out, err);
    cJSON_Delete(root);
    return rc;
}

mt_code mt_job_spec_read(const char *path, size_t max, char **out, size_t *len, mt_err *err)
{
    FILE *f;
    char *buf;
    long n = -1;

    *out = NULL;
    *len = 0;
    f = fopen(path, "rb");
    if (f == NULL)
        return mt_err_set(err,
                          errno == ENOENT   ? MT_NOT_FOUND
                          : errno == EACCES ? MT_PERMISSION_DENIED
                                            : MT_INVALID_ARGUMENT,
                          "open %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || (unsigned long)n > max || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: not a readable job spec file of at most %zu bytes", path, max);
    }
    buf = mt_malloc((size_t)n + 1);
    if (buf == NULL) {
        fclose(f);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        mt_free(buf);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: read error", path);
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = (size_t)n;
    return MT_OK;
}

mt_code mt_job_spec_load(const char *path, mt_job_spec **out, mt_err *err)
{
    char *buf;
    size_t n;
    mt_code rc;

    *out = NULL;
    rc = mt_job_spec_read(path, (size_t)64 << 20, &buf, &n, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_job_spec_parse(buf, n, out, err);
    mt_free(buf);
    return rc;
}

void mt_job_spec_free(mt_job_spec *spec)
{
    if (spec == NULL)
        return;
    mt_free(spec->layers);
    mt_free(spec);
}

mt_activation mt_model_layer_activation(const mt_job_spec *spec, int i)
{
    const mt_layer_spec *l = &spec->layers[i];
    /* the pair is a conv2d whose only reader is the max_pool2d right after it */
    bool pool_next = i + 1 < spec->n_layers && spec->layers[i + 1].kind == MT_LAYER_MAX_POOL2D &&
                     spec->layers[i + 1].activation == MT_ACT_LINEAR &&
                     spec->layers[i + 1].inputs[0] == i && mt_job_spec_consumers(spec, i) == 1;
    bool relu_conv_before =
        i > 0 && l->inputs[0] == i - 1 && spec->layers[i - 1].kind == MT_LAYER_CONV2D &&
        spec->layers[i - 1].activation == MT_ACT_RELU && mt_job_spec_consumers(spec, i - 1) == 1;

    if (l->kind == MT_LAYER_CONV2D && l->activation == MT_ACT_RELU && pool_next)
        return MT_ACT_LINEAR;
    if (l->kind == MT_LAYER_MAX_POOL2D && l->activation == MT_ACT_LINEAR && relu_conv_before)
        return MT_ACT_RELU;
    return l->activation;
}
