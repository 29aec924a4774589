/* SPDX-License-Identifier: MIT */
/*
 * test_layers.c — every registered layer kind (core/layers, mt_layer.h), through the example
 * model its module carries (mt_layer_ops.example):
 *   * the registry is complete: every mt_layer_kind has a module, found by its type name;
 *   * finite-difference gradients of every trainable parameter, on the reference engine with
 *     the plain reference kernels;
 *   * the fast kernels against the reference kernels: 3 training steps, weights within 1e-5;
 *   * the SPMD engine on the example's mesh (sharded as the example says) against the reference
 *     engine with reference kernels: 5 steps, weights within 1e-5 of each tensor's largest value.
 * A new layer kind is covered here by giving its module an example. Besides: the tied LM head
 * (dense "tied_to" an embedding) on its layouts and its refusals, and sequence parallelism
 * (positions over 'seq') against one device and its refusals.
 */
#include "mt_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "layers/mt_layer.h"
#include "mesh/mt_mesh.h"
#include "model/mt_model.h"
#include "spmd/mt_spmd.h"

#define N_EX  32 /* examples generated per model */
#define GB    8  /* global batch */
#define STEPS 5

typedef struct ex {
    const char *label; /* the kind's type name, or the name of a case of its own */
    char *json;
    mt_job_spec *spec;
    mt_spmd_config cfg;
    int rank;
    size_t shape[3], isz;
    float *x;
    int32_t *y;
} ex;

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}

/* The model of example (a spec fragment) whose layers include one of kind. */
static void ex_load_fragment(ex *e, const char *label, const char *example, mt_layer_kind kind)
{
    static const char pre[] = "{\"seed\":11,\"batch_size\":8,\"steps\":5,"
                              "\"optimizer\":{\"name\":\"sgd\",\"learning_rate\":0.05},";
    mt_err err = MT_ERR_INIT;
    size_t n;
    uint64_t seed = 99;
    bool found = false;

    memset(e, 0, sizeof(*e));
    e->label = label;
    assert_non_null(example);
    n = strlen(pre) + strlen(example) + 2;
    e->json = mt_calloc(n, 1);
    assert_non_null(e->json);
    snprintf(e->json, n, "%s%s}", pre, example);
    if (mt_job_spec_parse(e->json, strlen(e->json), &e->spec, &err) != MT_OK)
        fail_msg("%s example: %s", label, err.msg);
    if (mt_spmd_config_parse(e->json, strlen(e->json), &e->cfg, &err) != MT_OK)
        fail_msg("%s example config: %s", label, err.msg);
    for (int i = 0; i < e->spec->n_layers; i++)
        found = found || e->spec->layers[i].kind == kind;
    if (!found)
        fail_msg("%s example has no %s layer", label, mt_layer_ops_of(kind)->type);
    e->rank = e->spec->input_rank;
    assert_true(e->rank >= 1);
    e->isz = 1;
    for (int a = 0; a < e->rank; a++) {
        e->shape[a] = e->spec->input_shape[a];
        e->isz *= e->shape[a];
    }
    e->x = mt_calloc(N_EX * e->isz, sizeof(float));
    e->y = mt_calloc(N_EX, sizeof(int32_t));
    assert_non_null(e->x);
    assert_non_null(e->y);
    for (size_t i = 0; i < N_EX * e->isz; i++) /* token ids for a model that embeds them */
        e->x[i] = e->spec->layers[0].kind == MT_LAYER_EMBEDDING
                      ? (float)(lcg(&seed) % e->spec->layers[0].input_dim)
                      : (float)((double)(lcg(&seed) % 2000003) / 1000000.0 - 0.7);
    for (size_t i = 0; i < N_EX; i++)
        e->y[i] = (int32_t)(lcg(&seed) % 3);
}

/* The example of a layer kind's module. */
static void ex_load(ex *e, const mt_layer_ops *ops)
{
    ex_load_fragment(e, ops->type, ops->example, ops->kind);
}

static void ex_free(ex *e)
{
    mt_job_spec_free(e->spec);
    mt_spmd_config_fini(&e->cfg);
    mt_free(e->json);
    mt_free(e->x);
    mt_free(e->y);
}

static mt_model *ex_model(const ex *e, bool ref)
{
    mt_model *m = NULL;
    mt_err err = MT_ERR_INIT;
    if (mt_model_new(e->spec, e->rank, e->shape, GB, &m, &err) != MT_OK)
        fail_msg("%s: mt_model_new: %s", e->label, err.msg);
    mt_model_use_reference_kernels(m, ref);
    return m;
}

static void ex_train_model(const ex *e, mt_model *m, int steps)
{
    mt_err err = MT_ERR_INIT;
    for (int k = 0; k < steps; k++) {
        size_t first = ((size_t)k * GB) % N_EX;
        if (mt_model_train_step(m, e->x + first * e->isz, e->y + first, GB, GB, (uint64_t)k, first,
                                NULL, NULL, &err) != MT_OK)
            fail_msg("%s: step %d: %s", e->label, k, err.msg);
    }
}

/* max |a - b| / max |b| of two float arrays. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, v = 1e-12;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        v = fmax(v, fabs((double)b[i]));
    }
    return d / v;
}

/* check on the example of every registered kind. */
static void each_kind(void (*check)(const ex *e))
{
    for (int k = 0; k < MT_LAYER_KIND_COUNT; k++) {
        ex e;
        ex_load(&e, mt_layer_ops_of((mt_layer_kind)k));
        check(&e);
        ex_free(&e);
    }
}

static void test_registry_complete(void **state)
{
    char names[256];
    (void)state;
    for (int k = 0; k < MT_LAYER_KIND_COUNT; k++) {
        const mt_layer_ops *ops = mt_layer_ops_of((mt_layer_kind)k);
        assert_non_null(ops);
        assert_int_equal(ops->kind, k);
        assert_ptr_equal(mt_layer_ops_find(ops->type), ops);
        assert_non_null(ops->parse);
        assert_non_null(ops->plan);
        assert_non_null(ops->alloc);
        assert_non_null(ops->forward);
        assert_non_null(ops->backward);
        assert_non_null(ops->example);
        assert_true(ops->min_inputs >= 1 && ops->max_inputs >= ops->min_inputs);
        mt_layer_type_names(names, sizeof(names));
        assert_non_null(strstr(names, ops->type));
    }
    assert_null(mt_layer_ops_find("dense2"));
}

/* Mean loss of the batch after a training forward (dropout masks fixed by the step). */
static double model_loss(mt_model *m, const ex *e)
{
    double loss = 0.0;
    size_t ok = 0;
    assert_int_equal(mt_model_forward(m, e->x, GB, GB, true, 3, 0, NULL, NULL, NULL), MT_OK);
    assert_int_equal(mt_model_loss(m, e->y, GB, &loss, &ok, NULL), MT_OK);
    return loss / GB;
}

static void check_gradients(const ex *e)
{
    mt_model *m;
    mt_err err = MT_ERR_INIT;
    int bad = 0;
    uint64_t seed = 5;

    m = ex_model(e, true);
    for (size_t p = 0; p < mt_model_param_count(m); p++) { /* non-trivial biases, gammas */
        mt_model_param *pp = mt_model_param_at(m, p);
        if (pp->trainable && pp->init != MT_INIT_GLOROT_UNIFORM)
            for (size_t i = 0; i < pp->size; i++)
                pp->value[i] += (float)((double)(lcg(&seed) % 1000) / 1000.0 - 0.5) * 0.6f;
    }
    model_loss(m, e);
    assert_int_equal(mt_model_backward(m, NULL, &err), MT_OK);
    for (size_t p = 0; p < mt_model_param_count(m); p++) {
        mt_model_param *pp = mt_model_param_at(m, p);
        float *g;
        if (!pp->trainable)
            continue;
        g = mt_calloc(pp->size, sizeof(float));
        assert_non_null(g);
        memcpy(g, pp->grad, pp->size * sizeof(float));
        for (size_t i = 0; i < pp->size; i++) {
            /* a relu or max kink inside [x - h, x + h] spoils one step size: try a smaller one */
            bool ok = false;
            double num = 0.0;
            for (float h = 1e-3f; h > 5e-5f && !ok; h *= 0.1f) {
                float keep = pp->value[i];
                double fp, fm;
                pp->value[i] = keep + h;
                fp = model_loss(m, e);
                pp->value[i] = keep - h;
                fm = model_loss(m, e);
                pp->value[i] = keep;
                num = (fp - fm) / (2.0 * (double)h);
                ok = fabs(num - g[i]) <= 1e-3 + 3e-2 * fabs(num);
            }
            if (!ok) {
                if (bad < 8)
                    fprintf(stderr, "%s: %s[%zu]: analytic %.6g numeric %.6g\n", e->label, pp->name,
                            i, g[i], num);
                bad++;
            }
        }
        mt_free(g);
    }
    if (bad != 0)
        fail_msg("%s: %d gradients differ from finite differences", e->label, bad);
    mt_model_free(m);
}

static void test_gradients(void **state)
{
    (void)state;
    each_kind(check_gradients);
}

static void check_fast_vs_reference(const ex *e)
{
    mt_model *ref, *fast;

    ref = ex_model(e, true);
    fast = ex_model(e, false);
    ex_train_model(e, ref, 3);
    ex_train_model(e, fast, 3);
    for (size_t p = 0; p < mt_model_param_count(ref); p++) {
        mt_model_param *a = mt_model_param_at(fast, p), *b = mt_model_param_at(ref, p);
        double d = rel_diff(a->value, b->value, b->size);
        if (d > 1e-5)
            fail_msg("%s: %s: fast kernels differ from the reference by %.3g", e->label, b->name,
                     d);
    }
    mt_model_free(ref);
    mt_model_free(fast);
}

static void test_fast_vs_reference(void **state)
{
    (void)state;
    each_kind(check_fast_vs_reference);
}

/* The largest of max |a - b| / max |b| over the tensors of the mesh s and the one-device ref;
 * fails naming the tensor when one exceeds 1e-5. */
static double mesh_worst(mt_spmd *s, mt_model *ref, const char *label)
{
    mt_err err = MT_ERR_INIT;
    double worst = 0.0;

    assert_int_equal(mt_spmd_param_count(s), mt_model_param_count(ref));
    for (size_t p = 0; p < mt_model_param_count(ref); p++) {
        mt_model_param *b = mt_model_param_at(ref, p);
        float *g = mt_calloc(b->size, sizeof(float));
        double d;
        assert_non_null(g);
        assert_int_equal(mt_spmd_param_gather(s, b->name, g, &err), MT_OK);
        d = rel_diff(g, b->value, b->size);
        worst = fmax(worst, d);
        if (d > 1e-5)
            fail_msg("%s: %s on the mesh differs from one device by %.3g", label, b->name, d);
        mt_free(g);
    }
    return worst;
}

static void check_mesh_vs_reference(const ex *e)
{
    mt_model *ref;
    mt_spmd *s = NULL;
    mt_err err = MT_ERR_INIT;

    assert_non_null(e->cfg.mesh);
    assert_true(mt_mesh_num_devices(e->cfg.mesh) > 1);
    if (mt_spmd_new(e->spec, e->cfg.mesh, e->cfg.layouts, e->rank, e->shape, GB, NULL, &s, &err) !=
        MT_OK)
        fail_msg("%s: mt_spmd_new: %s", e->label, err.msg);
    for (int k = 0; k < STEPS; k++) {
        size_t first = ((size_t)k * GB) % N_EX;
        mt_step_metrics sm;
        if (mt_spmd_step(s, e->x + first * e->isz, e->y + first, GB, (uint64_t)k, first, &sm,
                         &err) != MT_OK)
            fail_msg("%s: spmd step %d: %s", e->label, k, err.msg);
    }
    ref = ex_model(e, true);
    ex_train_model(e, ref, STEPS);
    mesh_worst(s, ref, e->label);
    mt_model_free(ref);
    mt_spmd_free(s);
}

static void test_mesh_vs_reference(void **state)
{
    (void)state;
    each_kind(check_mesh_vs_reference);
}

/*
 * A GPT-2 style tied head (dense "tied_to" an embedding: kernel = tableᵀ, one tensor whose
 * gradient is the sum of both uses), sharded as the layouts that exist allow: the vocabulary
 * over model (head kernel's output axis), the features over model (its contraction), the table
 * over batch (FSDP, per layer and kept).
 */
#define TIED_MODEL                                                                                 \
    "\"model\":{\"input_shape\":[5],\"layers\":["                                                  \
    "{\"type\":\"embedding\",\"input_dim\":12,\"output_dim\":8,\"name\":\"tok\"},"                 \
    "{\"type\":\"layer_norm\"},{\"type\":\"dense\",\"units\":12,\"tied_to\":\"tok\"},"             \
    "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
static const char *const tied_examples[] = {
    TIED_MODEL "\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"tok\\\\.embeddings\":[\"model\",\"unsharded\"]}",
    TIED_MODEL "\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"tok\\\\.embeddings\":[\"unsharded\",\"model\"]}",
    TIED_MODEL
    "\"mesh\":{\"batch\":2},\"layouts\":{\"tok\\\\.embeddings\":[\"batch\",\"unsharded\"]}",
    TIED_MODEL "\"mesh\":{\"batch\":2},\"fsdp\":{\"reshard_after_forward\":false},"
               "\"layouts\":{\"tok\\\\.embeddings\":[\"unsharded\",\"batch\"]}",
};

static void test_tied_head(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(tied_examples) / sizeof(tied_examples[0]); k++) {
        ex e;
        mt_model *m;
        char label[32];
        snprintf(label, sizeof(label), "tied head %zu", k);
        ex_load_fragment(&e, label, tied_examples[k], MT_LAYER_EMBEDDING);
        m = ex_model(&e, false);                      /* one tensor: the table, no head kernel */
        assert_int_equal(mt_model_param_count(m), 6); /* table, gamma, beta, head bias, dense_2 */
        assert_non_null(mt_model_param_find(m, "tok.embeddings"));
        assert_null(mt_model_param_find(m, "dense_1.kernel"));
        assert_non_null(mt_model_param_find(m, "dense_1.bias"));
        mt_model_free(m);
        if (k == 0)
            check_gradients(&e);
        if (k == 0)
            check_fast_vs_reference(&e);
        check_mesh_vs_reference(&e);
        ex_free(&e);
    }
}

/* A spec with the tied head's fields replaced: the error of parsing or planning it. */
static void tied_error(const char *head, const char *extra, const char *want)
{
    char json[1024];
    mt_err err = MT_ERR_INIT;
    mt_job_spec *spec = NULL;
    mt_model *m = NULL;
    mt_spmd_config cfg;
    size_t shape[1] = {5};
    mt_code rc;

    snprintf(json, sizeof(json),
             "{\"model\":{\"input_shape\":[5],\"layers\":["
             "{\"type\":\"embedding\",\"input_dim\":12,\"output_dim\":8,\"name\":\"tok\"},"
             "{\"type\":\"layer_norm\",\"name\":\"ln\"},%s]}%s}",
             head, extra);
    rc = mt_job_spec_parse(json, strlen(json), &spec, &err);
    if (rc == MT_OK && extra[0] == '\0')
        rc = mt_model_new(spec, 1, shape, 4, &m, &err);
    if (rc == MT_OK && extra[0] != '\0') {
        mt_spmd *s = NULL;
        assert_int_equal(mt_spmd_config_parse(json, strlen(json), &cfg, &err), MT_OK);
        rc = mt_spmd_new(spec, cfg.mesh, cfg.layouts, 1, shape, 4, NULL, &s, &err);
        mt_spmd_free(s);
        mt_spmd_config_fini(&cfg);
    }
    if (rc == MT_OK || strstr(err.msg, want) == NULL)
        fail_msg("%s%s: got %s \"%s\", want \"%s\"", head, extra, mt_code_name(rc), err.msg, want);
    assert_int_equal(rc, MT_INVALID_ARGUMENT);
    mt_model_free(m);
    mt_job_spec_free(spec);
}

static void test_tied_head_errors(void **state)
{
    (void)state;
    tied_error("{\"type\":\"dense\",\"units\":10,\"tied_to\":\"tok\"}", "",
               "model.layers[2].units: 10 differs from the input_dim 12 of tok");
    tied_error("{\"type\":\"dense\",\"units\":12,\"tied_to\":\"ln\"}", "",
               "model.layers[2].tied_to: \"ln\" is a layer_norm layer");
    tied_error("{\"type\":\"dense\",\"units\":12,\"tied_to\":\"nope\"}", "",
               "model.layers[2].tied_to: \"nope\" is not the name of a layer");
    tied_error("{\"type\":\"dense\",\"units\":12,\"tied_to\":\"head\",\"name\":\"head\"}", "",
               "model.layers[2].tied_to: \"head\" is not an earlier layer");
    tied_error("{\"type\":\"dense\",\"units\":12,\"tied_to\":7}", "", "model.layers[2].tied_to");
    tied_error("{\"type\":\"dense\",\"units\":8},{\"type\":\"dense\",\"units\":12,"
               "\"tied_to\":\"tok\"},{\"type\":\"dense\",\"units\":12,\"tied_to\":\"tok\","
               "\"inputs\":[\"ln\"]},{\"type\":\"add\",\"inputs\":[\"dense_2\",\"dense_3\"]}",
               "", "model.layers[4].tied_to: \"tok\" is already tied to by model.layers[3]");
    tied_error("{\"type\":\"dense\",\"units\":4},{\"type\":\"dense\",\"units\":12,"
               "\"tied_to\":\"tok\"}",
               "",
               "model.layers[3].tied_to: the output_dim 8 of tok differs from the layer's "
               "input width 4");
    /* the head has no kernel of its own: a layout for one is refused, naming the key */
    tied_error("{\"type\":\"dense\",\"units\":12,\"tied_to\":\"tok\",\"name\":\"head\"}",
               ",\"mesh\":{\"batch\":1,\"model\":2},"
               "\"layouts\":{\"head\\\\.kernel\":[\"unsharded\",\"model\"]}",
               "layouts[\"head\\\\.kernel\"]: matches no weight");
    /* its bias follows the table's vocabulary axis: another layout disagrees */
    tied_error("{\"type\":\"dense\",\"units\":12,\"tied_to\":\"tok\",\"name\":\"head\"}",
               ",\"mesh\":{\"batch\":1,\"model\":2},\"layouts\":{\"tok\\\\.embeddings\":"
               "[\"model\",\"unsharded\"],\"head\\\\.bias\":[\"unsharded\"]}",
               "head.bias must follow its layer's feature sharding");
}

/*
 * Sequence parallelism: a GPT block (token and position embeddings, causal attention, residual,
 * dropout, gelu MLP, a tied head; a label per position) with the positions split over 'seq'
 * (input_layout [batch, seq]) equals one device after 10 steps, alone, with batch and with
 * Megatron layouts over model; with 140 positions (two blocks of 35 per device: attention's row
 * blocks of 32 and 3) and with 6 (3 rows per device, odd: one contiguous block).
 */
#define SEQ_T          8
#define SEQ_T_MAX      140
#define SEQ_MODEL      SEQ_MODEL_T("8")
#define SEQ_TIED_HEAD  "{\"type\":\"dense\",\"units\":12,\"tied_to\":\"tok\",\"name\":\"head\"}"
#define SEQ_MODEL_T(t) SEQ_MODEL_H(t, SEQ_TIED_HEAD)
#define SEQ_MEGATRON                                                                               \
    "\"qkv\\\\.kernel\":[\"unsharded\",\"model\"],\"proj\\\\.kernel\":[\"model\",\"unsharded\"],"  \
    "\"fc\\\\.kernel\":[\"unsharded\",\"model\"],\"out\\\\.kernel\":[\"model\",\"unsharded\"]"
#define SEQ_MODEL_H(t, head)                                                                       \
    "\"model\":{\"input_shape\":[" t "],\"layers\":["                                              \
    "{\"type\":\"embedding\",\"input_dim\":12,\"output_dim\":8,\"name\":\"tok\"},"                 \
    "{\"type\":\"position_embedding\",\"name\":\"pos\"},{\"type\":\"layer_norm\"},"                \
    "{\"type\":\"dense\",\"units\":24,\"name\":\"qkv\"},"                                          \
    "{\"type\":\"attention\",\"num_heads\":2,\"causal\":true},"                                    \
    "{\"type\":\"dense\",\"units\":8,\"name\":\"proj\"},"                                          \
    "{\"type\":\"add\",\"inputs\":[\"pos\",\"proj\"],\"name\":\"res\"},"                           \
    "{\"type\":\"dropout\",\"rate\":0.2},{\"type\":\"layer_norm\"},"                               \
    "{\"type\":\"dense\",\"units\":16,\"activation\":\"gelu\",\"name\":\"fc\"},"                   \
    "{\"type\":\"dense\",\"units\":8,\"name\":\"out\"}," head                                      \
    "]},\"input_layout\":[\"batch\",\"seq\"],"
static const struct {
    size_t t;
    const char *json;
} seq_examples[] = {
    {SEQ_T, "{" SEQ_MODEL "\"mesh\":{\"batch\":1,\"seq\":2}}"},
    {140, "{" SEQ_MODEL_T("140") "\"mesh\":{\"batch\":1,\"seq\":2}}"},
    {6, "{" SEQ_MODEL_T("6") "\"mesh\":{\"batch\":2,\"seq\":2}}"},
    {SEQ_T, "{" SEQ_MODEL "\"mesh\":{\"batch\":2,\"seq\":2}}"},
    /* Megatron-SP (model and seq): the vocabulary over model (its rows reduce-scattered, the
     * tied head column parallel), or whole (each device embeds its rows; the head on them, tied
     * or not), or an untied vocabulary-parallel head */
    {SEQ_T, "{" SEQ_MODEL "\"mesh\":{\"batch\":1,\"model\":2,\"seq\":2},\"layouts\":{" SEQ_MEGATRON
            ",\"tok\\\\.embeddings\":[\"model\",\"unsharded\"]}}"},
    {SEQ_T,
     "{" SEQ_MODEL "\"mesh\":{\"batch\":1,\"model\":2,\"seq\":2},\"layouts\":{" SEQ_MEGATRON "}}"},
    {SEQ_T,
     "{" SEQ_MODEL_H(
         "8", "{\"type\":\"dense\",\"units\":12,\"name\":\"head\"}") "\"mesh\":{\"batch\":2,"
                                                                     "\"model\":2,\"seq\":2},"
                                                                     "\"layouts\":{" SEQ_MEGATRON
                                                                     "}}"},
    {SEQ_T,
     "{" SEQ_MODEL_H(
         "8", "{\"type\":\"dense\",\"units\":12,\"name\":\"head\"}") "\"mesh\":{\"batch\":1,"
                                                                     "\"model\":2,\"seq\":2},"
                                                                     "\"layouts\":{" SEQ_MEGATRON
                                                                     ",\"head\\\\.kernel\":["
                                                                     "\"unsharded\",\"model\"]}}"},
    {SEQ_T, "{" SEQ_MODEL "\"mesh\":{\"batch\":2,\"seq\":2},\"layouts\":{"
            "\".*kernel\":[\"batch\",\"unsharded\"],\"tok\\\\.embeddings\":[\"unsharded\","
            "\"batch\"]}}"},
    {SEQ_T, "{" SEQ_MODEL "\"mesh\":{\"batch\":2,\"seq\":2},\"fsdp\":{\"reshard_after_"
            "forward\":false},\"layouts\":{\".*kernel\":[\"batch\",\"unsharded\"],"
            "\"tok\\\\.embeddings\":[\"unsharded\",\"batch\"]}}"},
};

static void test_sequence_parallel(void **state)
{
    static float x[N_EX * SEQ_T_MAX];
    static int32_t y[N_EX * SEQ_T_MAX];
    uint64_t seed = 17;
    mt_err err = MT_ERR_INIT;

    (void)state;
    for (size_t i = 0; i < N_EX * SEQ_T_MAX; i++) {
        x[i] = (float)(lcg(&seed) % 12);
        y[i] = (int32_t)(lcg(&seed) % 12);
    }
    for (size_t k = 0; k < sizeof(seq_examples) / sizeof(seq_examples[0]); k++) {
        size_t t = seq_examples[k].t, shape[1] = {t};
        char json[2048];
        mt_job_spec *spec = NULL;
        mt_spmd_config cfg;
        mt_spmd *s = NULL;
        mt_model *ref = NULL;
        char label[16];

        snprintf(json, sizeof(json),
                 "{\"seed\":5,\"batch_size\":8,\"optimizer\":{\"name\":"
                 "\"sgd\",\"learning_rate\":0.1},%s",
                 seq_examples[k].json + 1);
        if (mt_job_spec_parse(json, strlen(json), &spec, &err) != MT_OK ||
            mt_spmd_config_parse(json, strlen(json), &cfg, &err) != MT_OK)
            fail_msg("seq %zu: %s", k, err.msg);
        if (mt_spmd_new(spec, cfg.mesh, cfg.layouts, 1, shape, GB, NULL, &s, &err) != MT_OK)
            fail_msg("seq %zu: mt_spmd_new: %s", k, err.msg);
        assert_int_equal(mt_model_new(spec, 1, shape, GB, &ref, &err), MT_OK);
        mt_model_use_reference_kernels(ref, true);
        for (int st = 0; st < 10; st++) {
            size_t first = ((size_t)st * GB) % N_EX;
            mt_step_metrics a, b;
            if (mt_spmd_step(s, x + first * t, y + first * t, GB, (uint64_t)st, first, &a, &err) !=
                MT_OK)
                fail_msg("seq %zu: step %d: %s", k, st, err.msg);
            assert_int_equal(mt_model_train_step(ref, x + first * t, y + first * t, GB, GB,
                                                 (uint64_t)st, first, NULL, &b, &err),
                             MT_OK);
            if (fabs(a.loss - b.loss) > 1e-5 * fabs(b.loss))
                fail_msg("seq %zu: step %d: loss %.9g on the mesh, %.9g on one device", k, st,
                         a.loss, b.loss);
        }
        if (mt_mesh_dim_index(cfg.mesh, "model") >= 0) { /* Megatron-SP engaged */
            mt_spmd_layer_plan lp[16];
            mt_spmd_plan_info info = {.layers = lp};
            int md = mt_mesh_dim_index(cfg.mesh, "model");
            assert_int_equal(mt_spmd_check(spec, cfg.mesh, cfg.layouts, 1, shape, GB, &info, &err),
                             MT_OK);
            /* layers[2], the first layer norm, on split rows: its gamma and beta summed */
            assert_int_equal(info.layers[2].comm_bytes[md], 2 * 8 * sizeof(float));
        }
        snprintf(label, sizeof(label), "seq %zu", k);
        printf("sequence parallel %zu: worst relative difference %.2e after 10 steps\n", k,
               mesh_worst(s, ref, label));
        mt_model_free(ref);
        mt_spmd_free(s);
        mt_spmd_config_fini(&cfg);
        mt_job_spec_free(spec);
    }
}

/* The positions of each device (mt_layer_seq_position): a permutation of 0..T-1; with an even
 * rl the zig-zag blocks k and 2S-1-k, whose causal work (keys met: position + 1 summed over the
 * rows) is the same on every device; with an odd rl the contiguous block k. */
static void test_sequence_positions(void **state)
{
    static const size_t cases[][2] = {{2, 4}, {4, 2}, {2, 70}, {3, 6}, {2, 3}, {3, 5}, {1, 7}};
    (void)state;
    assert_int_equal(mt_layer_seq_position(2, 0, 4, 2), 6);
    assert_int_equal(mt_layer_seq_position(2, 1, 4, 3), 5);
    assert_int_equal(mt_layer_seq_position(2, 1, 3, 0), 3);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t s = cases[c][0], rl = cases[c][1], seen[512] = {0}, work0 = 0;
        for (size_t k = 0; k < s; k++) {
            size_t work = 0;
            for (size_t r = 0; r < rl; r++) {
                size_t p = mt_layer_seq_position(s, k, rl, r);
                assert_true(p < s * rl);
                seen[p]++;
                work += p + 1;
                if (rl % 2 != 0)
                    assert_int_equal(p, k * rl + r);
            }
            if (k == 0)
                work0 = work;
            if (rl % 2 == 0)
                assert_int_equal(work, work0);
        }
        for (size_t p = 0; p < s * rl; p++)
            assert_int_equal(seen[p], 1);
    }
}

/* mt_spmd_new's error for json (a model of SEQ_T token ids). */
static void seq_error_json(const char *json, const char *want)
{
    mt_err err = MT_ERR_INIT;
    mt_job_spec *spec = NULL;
    mt_spmd_config cfg;
    mt_spmd *s = NULL;
    size_t shape[1] = {SEQ_T};
    mt_code rc;

    assert_int_equal(mt_job_spec_parse(json, strlen(json), &spec, &err), MT_OK);
    assert_int_equal(mt_spmd_config_parse(json, strlen(json), &cfg, &err), MT_OK);
    rc = mt_spmd_new(spec, cfg.mesh, cfg.layouts, 1, shape, GB, NULL, &s, &err);
    if (rc != MT_INVALID_ARGUMENT || strstr(err.msg, want) == NULL)
        fail_msg("%s: got %s \"%s\", want \"%s\"", json, mt_code_name(rc), err.msg, want);
    mt_spmd_free(s);
    mt_spmd_config_fini(&cfg);
    mt_job_spec_free(spec);
}

/* The spec of SEQ_MODEL on mesh, with extra fields: mt_spmd_new's error. */
static void seq_error(const char *mesh, const char *extra, const char *want)
{
    char json[2048];
    snprintf(json, sizeof(json), "{" SEQ_MODEL "\"mesh\":%s%s}", mesh, extra);
    seq_error_json(json, want);
}

static void test_sequence_parallel_errors(void **state)
{
    (void)state;
    seq_error("{\"batch\":1,\"seq\":3}", "",
              "dataset.block_size: 8 positions are not divisible by the 3 devices of 'seq'");
    seq_error_json("{\"model\":{\"input_shape\":[8],\"layers\":[{\"type\":\"embedding\","
                   "\"input_dim\":12,\"output_dim\":4},{\"type\":\"flatten\"},{\"type\":\"dense\","
                   "\"units\":3}]},\"input_layout\":[\"batch\",\"seq\"],\"mesh\":{\"batch\":1,"
                   "\"seq\":2}}",
                   "model.layers[1] (flatten_1): a flatten layer mixes positions");
    seq_error("{\"batch\":1,\"seq\":2}", ",\"loss\":\"mse\"", "needs a label per position");
}

/* The bytes plan says layer `layer` of the job (batch 8, input shape[3]: a spec of pre, arg and
 * post after a common head) hands to the collectives over `model` per step. */
static uint64_t model_comm(const char *pre, const char *arg, const char *post, const size_t *shape,
                           int layer)
{
    char json[1024];
    mt_err err = {0};
    mt_job_spec *spec = NULL;
    mt_spmd_config cfg;
    mt_spmd_layer_plan lp[8];
    mt_spmd_plan_info info = {.layers = lp};
    uint64_t bytes;
    snprintf(json, sizeof(json), "%s%s%s%s",
             "{\"seed\":1,\"batch_size\":8,\"optimizer\":\"sgd\",\"learning_rate\":0.1,"
             "\"loss\":\"sparse_categorical_crossentropy\",",
             pre, arg, post);
    if (mt_job_spec_parse(json, strlen(json), &spec, &err) != MT_OK ||
        mt_spmd_config_parse(json, strlen(json), &cfg, &err) != MT_OK)
        fail_msg("%s: %s", json, err.msg);
    assert_true(spec->n_layers <= 8);
    if (mt_spmd_check(spec, cfg.mesh, cfg.layouts, 3, shape, 8, &info, &err) != MT_OK)
        fail_msg("%s: %s", json, err.msg);
    bytes = info.layers[layer].comm_bytes[mt_mesh_dim_index(cfg.mesh, "model")];
    mt_spmd_config_fini(&cfg);
    mt_job_spec_free(spec);
    return bytes;
}

/*
 * plan's communication of a conv2d whose filters are split over `model`: its backward allreduce
 * carries dx (B x H x W x C floats of its input, 6 x 6 x 4) under fixed_mesh, dcols (B x OH x OW x
 * KH x KW x C: the canonical tree over the filters' chains is summed before col2im) under
 * mesh_invariant.
 */
static void test_conv_filter_split_comm(void **state)
{
    static const char *const modes[2] = {"fixed_mesh", "mesh_invariant"};
    const size_t shape[3] = {6, 6, 2}, b = 8, dx = b * 6 * 6 * 4, dcols = b * 4 * 4 * 3 * 3 * 4;
    (void)state;
    for (int m = 0; m < 2; m++) {
        const uint64_t bytes = model_comm(
            "\"reproducibility\":\"", modes[m],
            "\",\"model\":{\"input_shape\":[6,6,2],\"layers\":[{\"type\":\"conv2d\","
            "\"filters\":4,\"kernel_size\":3,\"padding\":\"same\"},{\"type\":\"conv2d\","
            "\"filters\":4,\"kernel_size\":3},{\"type\":\"flatten\"},{\"type\":\"dense\","
            "\"units\":3}]},\"mesh\":{\"batch\":1,\"model\":2},\"layouts\":{"
            "\"conv2d_2\\\\.kernel\":[\"unsharded\",\"unsharded\",\"unsharded\",\"model\"]}}",
            shape, 1);
        /* conv2d_2: its backward's allreduce over model (its forward's output is sharded) */
        assert_int_equal(bytes, (m == 0 ? dx : dcols) * sizeof(float));
    }
}

/*
 * A layer computes no input gradient when nothing before it needs one (mt_layer.no_dx): a dense
 * layer reading dropout on a flatten of the model input sends no dx over `model` (its kernel's
 * output axis split there), where the same layer reading another dense layer allreduces its dx
 * (B x 16 floats) over `model`.
 */
static void test_no_dx_before_parameters(void **state)
{
    static const char *const first[2] = {"{\"type\":\"dropout\",\"rate\":0.1}",
                                         "{\"type\":\"dense\",\"units\":16}"};
    const size_t shape[3] = {4, 4, 1};
    (void)state;
    for (int m = 0; m < 2; m++) {
        const uint64_t bytes = model_comm(
            "\"model\":{\"input_shape\":[4,4,1],\"layers\":[{\"type\":\"flatten\"},", first[m],
            ",{\"type\":\"dense\",\"units\":8,\"name\":\"split\"},{\"type\":\"dense\","
            "\"units\":3}]},\"mesh\":{\"batch\":1,\"model\":2},\"layouts\":{"
            "\"split\\\\.kernel\":[\"unsharded\",\"model\"]}}",
            shape, 2);
        assert_int_equal(bytes, m == 0 ? 0 : 8 * 16 * sizeof(float));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_complete),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_mesh_vs_reference),
        cmocka_unit_test(test_tied_head),
        cmocka_unit_test(test_tied_head_errors),
        cmocka_unit_test(test_sequence_parallel),
        cmocka_unit_test(test_sequence_parallel_errors),
        cmocka_unit_test(test_sequence_positions),
        cmocka_unit_test(test_conv_filter_split_comm),
        cmocka_unit_test(test_no_dx_before_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
