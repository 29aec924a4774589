/* SPDX-License-Identifier: MIT */
/*
 * test_loss_engines.c — core/loss inside both engines: a per-pixel classifier (a 1×1 conv2d's
 * (H, W, K) logits, one class label per pixel read from a NumPy y of shape (N, H, W)) and
 * regression / binary heads on float targets train on a mesh to the weights of one device
 * (core/model's reference) within 1e-5 after 10 steps; the reported loss does not depend on how
 * the global batch is split over replicas (even, uneven, empty pieces); a loss that does not fit
 * the data is refused naming "loss".
 */
#include "mt_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "model/mt_model.h"
#include "spmd/mt_spmd.h"

#define N     24 /* examples */
#define H     6
#define W     6
#define C     2
#define K     3 /* classes per pixel */
#define STEPS 10
#define GB    8

/* A per-pixel classifier: conv 3x3 same (8, relu), then a 1x1 conv to K logits per pixel. */
#define PIXEL_SPEC(extra)                                                                          \
    "{\"seed\":3,\"batch_size\":8,\"optimizer\":\"sgd\",\"learning_rate\":0.1,"                    \
    "\"model\":{\"input_shape\":[6,6,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":8,"           \
    "\"kernel_size\":3,\"padding\":\"same\",\"activation\":\"relu\"},{\"type\":\"conv2d\","        \
    "\"filters\":3,\"kernel_size\":1}]}" extra "}"

typedef struct set {
    float *x;   /* (N, dim) */
    int32_t *y; /* (N, ydim) or NULL */
    float *t;   /* (N, tdim) or NULL */
    size_t dim, ydim, tdim;
} set;

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/mt_loss_engines_XXXXXX");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A .npy file: descr, shape text, raw little-endian data. */
static void write_npy(const char *name, const char *descr, const char *shape, const void *data,
                      size_t bytes)
{
    char path[128], head[128];
    int n = snprintf(head, sizeof(head), "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
    uint16_t hl = (uint16_t)((size_t)n + pad + 1);
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(head, 1, (size_t)n, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, bytes, f);
    fclose(f);
}

/* The per-pixel set written as x (N, H, W, C) f4 and y (N, H, W) i4, read back by core/data. */
static set pixel_set(void)
{
    static float x[N * H * W * C];
    static int32_t y[N * H * W];
    const char *json = "{\"format\":\"npy\",\"train\":{\"x\":\"x.npy\",\"y\":\"y.npy\"}}";
    cJSON *node = cJSON_Parse(json);
    mt_data_spec *ds = NULL;
    mt_data_dataset *d = NULL;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    set s;

    for (size_t i = 0; i < N * H * W * C; i++)
        x[i] = (float)sin(0.37 * (double)i) + 0.2f * (float)(i % 3);
    for (size_t e = 0; e < N; e++)
        for (size_t p = 0; p < H * W; p++) /* the class follows the pixel's first channel */
        {
            float v = x[(e * H * W + p) * C];
            y[e * H * W + p] = v < -0.3f ? 0 : v < 0.5f ? 1 : 2;
        }
    write_npy("x.npy", "<f4", "(24, 6, 6, 2)", x, sizeof(x));
    write_npy("y.npy", "<i4", "(24, 6, 6)", y, sizeof(y));
    assert_int_equal(mt_data_spec_parse(node, "dataset", dir, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_open(ds, MT_DATA_SPLIT_TRAIN, NULL, &d, &err), MT_OK);
    assert_int_equal(mt_data_dataset_load(d, 0, &b, &err), MT_OK);
    assert_int_equal(b.n, N);
    assert_int_equal(b.y_dim, H * W);
    s.x = b.x, s.y = b.y, s.t = NULL;
    s.dim = b.dim, s.ydim = b.y_dim, s.tdim = 0;
    assert_memory_equal(s.y, y, sizeof(y));
    b.x = NULL, b.y = NULL; /* adopted */
    mt_data_block_fini(&b);
    mt_data_dataset_free(d);
    mt_data_spec_free(ds);
    cJSON_Delete(node);
    return s;
}

static void set_free(set *s)
{
    mt_free(s->x);
    mt_free(s->y);
    mt_free(s->t);
}

static const int32_t *ys(const set *s, size_t first)
{
    return s->y != NULL ? s->y + first * s->ydim : NULL;
}

static const float *ts(const set *s, size_t first)
{
    return s->t != NULL ? s->t + first * s->tdim : NULL;
}

/* STEPS steps on one device (the reference engine) and on the spec's mesh; weights compared
 * within tol (max |a-b| / max |b| per tensor), losses too. */
static void mesh_equals_one_device(const char *json, int rank, const size_t *shape, const set *d,
                                   double tol)
{
    mt_job_spec *spec = NULL;
    mt_spmd_config cfg;
    mt_model *m = NULL;
    mt_spmd *s = NULL;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_job_spec_parse(json, strlen(json), &spec, &err), MT_OK);
    if (mt_spmd_config_parse(json, strlen(json), &cfg, &err) != MT_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(mt_model_new(spec, rank, shape, GB, &m, &err), MT_OK);
    assert_int_equal(mt_model_check_data(m, d->ydim, d->tdim, &err), MT_OK);
    if (mt_spmd_new(spec, cfg.mesh, cfg.layouts, rank, shape, GB, NULL, &s, &err) != MT_OK)
        fail_msg("mt_spmd_new: %s", err.msg);
    for (int k = 0; k < STEPS; k++) {
        size_t first = ((size_t)k * GB) % N;
        mt_step_metrics a, b;
        assert_int_equal(mt_model_train_step_targets(m, d->x + first * d->dim, ys(d, first),
                                                     ts(d, first), GB, GB, (uint64_t)k, first, NULL,
                                                     &a, &err),
                         MT_OK);
        if (mt_spmd_step_targets(s, d->x + first * d->dim, ys(d, first), ts(d, first), GB,
                                 (uint64_t)k, first, &b, &err) != MT_OK)
            fail_msg("step %d: %s", k, err.msg);
        if (fabs(a.loss - b.loss) > tol * fmax(1.0, fabs(a.loss)))
            fail_msg("step %d: loss %.9g on one device, %.9g on the mesh", k, a.loss, b.loss);
        assert_true(fabs(a.accuracy - b.accuracy) < 1e-9);
    }
    for (size_t i = 0; i < mt_model_param_count(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        float *g = mt_calloc(p->size, sizeof(float));
        double md = 0.0, mv = 1e-12;
        assert_int_equal(mt_spmd_param_gather(s, p->name, g, &err), MT_OK);
        for (size_t e = 0; e < p->size; e++) {
            md = fmax(md, fabs((double)g[e] - (double)p->value[e]));
            mv = fmax(mv, fabs((double)p->value[e]));
        }
        if (md / mv > tol)
            fail_msg("%s: max relative difference %.3g > %.3g", p->name, md / mv, tol);
        mt_free(g);
    }
    mt_spmd_free(s);
    mt_model_free(m);
    mt_spmd_config_fini(&cfg);
    mt_job_spec_free(spec);
}

static void test_loss_engines_per_pixel_mesh_equals_one_device(void **state)
{
    size_t shape[3] = {H, W, C};
    set d = pixel_set();
    (void)state;
    /* data parallel */
    mesh_equals_one_device(PIXEL_SPEC(",\"mesh\":{\"batch\":4}"), 3, shape, &d, 1e-5);
    /* data parallel x the 1x1 conv's output channels (the logits) sharded over model */
    mesh_equals_one_device(PIXEL_SPEC(",\"mesh\":{\"batch\":2,\"model\":3},\"layouts\":"
                                      "{\"conv2d_2\\\\.kernel\":[\"unsharded\",\"unsharded\","
                                      "\"unsharded\",\"model\"]}"),
                           3, shape, &d, 1e-5);
    set_free(&d);
}

/* The reported loss of a global batch is the mean over its labels whatever the split: one device
 * and 4 even replicas give the same loss (up to float rounding) as the evaluation's mean over
 * every label; so do uneven pieces (2, 0, 2, 1) of 5 examples. */
static void test_loss_engines_batch_split_invariance(void **state)
{
    size_t shape[3] = {H, W, C};
    set d = pixel_set();
    const char *one = PIXEL_SPEC(",\"mesh\":{\"batch\":1}"),
               *four = PIXEL_SPEC(",\"mesh\":{\"batch\":4}");
    mt_job_spec *s1 = NULL, *s4 = NULL;
    mt_spmd_config c1, c4;
    mt_spmd *a = NULL, *b = NULL, *c = NULL;
    mt_step_metrics ma, mb, mc;
    mt_spmd_piece pc[4];
    double sums[MT_LOSS_NSUMS] = {0}, sums5[MT_LOSS_NSUMS] = {0};
    size_t gc = 0;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_job_spec_parse(one, strlen(one), &s1, &err), MT_OK);
    assert_int_equal(mt_job_spec_parse(four, strlen(four), &s4, &err), MT_OK);
    assert_int_equal(mt_spmd_config_parse(one, strlen(one), &c1, &err), MT_OK);
    assert_int_equal(mt_spmd_config_parse(four, strlen(four), &c4, &err), MT_OK);
    assert_int_equal(mt_spmd_new(s1, c1.mesh, c1.layouts, 3, shape, GB, NULL, &a, &err), MT_OK);
    assert_int_equal(mt_spmd_new(s4, c4.mesh, c4.layouts, 3, shape, GB, NULL, &b, &err), MT_OK);
    assert_int_equal(mt_spmd_new(s4, c4.mesh, c4.layouts, 3, shape, GB, NULL, &c, &err), MT_OK);
    /* the evaluation of the 8 examples before any step: the mean over their 8·36 labels */
    assert_int_equal(mt_spmd_evaluate_sums(a, d.x, d.y, NULL, GB, sums, NULL, &err), MT_OK);
    assert_int_equal(mt_spmd_evaluate_sums(a, d.x, d.y, NULL, 5, sums5, NULL, &err), MT_OK);
    assert_int_equal(mt_spmd_step(a, d.x, d.y, GB, 0, 0, &ma, &err), MT_OK);
    assert_int_equal(mt_spmd_step(b, d.x, d.y, GB, 0, 0, &mb, &err), MT_OK);
    memset(pc, 0, sizeof(pc));
    pc[0] = (mt_spmd_piece){d.x, d.y, 2, 0, NULL, false};
    pc[2] = (mt_spmd_piece){d.x + 2 * d.dim, d.y + 2 * d.ydim, 2, 2, NULL, false};
    pc[3] = (mt_spmd_piece){d.x + 4 * d.dim, d.y + 4 * d.ydim, 1, 4, NULL, false};
    if (mt_spmd_step_pieces(c, pc, 0, &gc, &mc, &err) != MT_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gc, 5);
    assert_true(fabs(ma.loss - sums[MT_LOSS_SUM_LOSS] / (GB * H * W)) < 1e-6);
    assert_true(fabs(ma.loss - mb.loss) < 1e-6);
    assert_true(fabs(mc.loss - sums5[MT_LOSS_SUM_LOSS] / (5 * H * W)) < 1e-6);
    assert_true(fabs(mc.accuracy - sums5[MT_LOSS_SUM_CORRECT] / (5 * H * W)) < 1e-9);
    assert_true(ma.examples == GB && mc.examples == 5);
    mt_spmd_free(a);
    mt_spmd_free(b);
    mt_spmd_free(c);
    mt_spmd_config_fini(&c1);
    mt_spmd_config_fini(&c4);
    mt_job_spec_free(s1);
    mt_job_spec_free(s4);
    set_free(&d);
}

/* mesh_invariant: the evaluation sums of a full global batch and of a short one (5 examples),
 * before and after 3 training steps, and the steps' losses, on the spec's mesh. */
static void inv_sums(const char *json, const set *d, double sums[4][MT_LOSS_NSUMS], double *loss)
{
    size_t shape[3] = {H, W, C};
    mt_job_spec *spec = NULL;
    mt_spmd_config cfg;
    mt_spmd *s = NULL;
    mt_err err = MT_ERR_INIT;

    memset(sums, 0, 4 * sizeof(sums[0]));
    assert_int_equal(mt_job_spec_parse(json, strlen(json), &spec, &err), MT_OK);
    assert_int_equal(mt_spmd_config_parse(json, strlen(json), &cfg, &err), MT_OK);
    if (mt_spmd_new(spec, cfg.mesh, cfg.layouts, 3, shape, GB, NULL, &s, &err) != MT_OK)
        fail_msg("mt_spmd_new: %s", err.msg);
    for (int k = 0; k < 3; k++) {
        size_t first = (size_t)k * GB;
        mt_step_metrics m;
        if (k == 0 && (mt_spmd_evaluate_sums(s, d->x, d->y, NULL, GB, sums[0], NULL, &err) ||
                       mt_spmd_evaluate_sums(s, d->x, d->y, NULL, 5, sums[1], NULL, &err)))
            fail_msg("evaluate: %s", err.msg);
        if (mt_spmd_step(s, d->x + first * d->dim, d->y + first * d->ydim, GB, (uint64_t)k, first,
                         &m, &err) != MT_OK)
            fail_msg("step %d: %s", k, err.msg);
        loss[k] = m.loss;
    }
    assert_int_equal(mt_spmd_evaluate_sums(s, d->x, d->y, NULL, GB, sums[2], NULL, &err), MT_OK);
    assert_int_equal(mt_spmd_evaluate_sums(s, d->x, d->y, NULL, 5, sums[3], NULL, &err), MT_OK);
    mt_spmd_free(s);
    mt_spmd_config_fini(&cfg);
    mt_job_spec_free(spec);
}

/* "reproducibility": "mesh_invariant" (docs/reproducibility.md): the training losses and the
 * evaluation's sums (a full and a short chunk, before and after 3 steps) are the same doubles on
 * batch=1, batch=4 and batch=2,model=2 with the first conv's filters over model. */
static void test_loss_engines_mesh_invariant_eval(void **state)
{
#define INV ",\"reproducibility\":\"mesh_invariant\""
    static const char *const meshes[] = {
        PIXEL_SPEC(INV ",\"mesh\":{\"batch\":4}"),
        PIXEL_SPEC(INV ",\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":"
                       "[\"unsharded\",\"unsharded\",\"unsharded\",\"model\"]}")};
    const char *one = PIXEL_SPEC(INV ",\"mesh\":{\"batch\":1}");
#undef INV
    set d = pixel_set();
    double want[4][MT_LOSS_NSUMS], got[4][MT_LOSS_NSUMS], wl[3], gl[3];
    (void)state;
    inv_sums(one, &d, want, wl);
    for (size_t i = 0; i < sizeof(meshes) / sizeof(meshes[0]); i++) {
        inv_sums(meshes[i], &d, got, gl);
        if (memcmp(got, want, sizeof(want)) != 0)
            fail_msg("mesh %zu: evaluation sums differ from one device (loss %.17g vs %.17g)", i,
                     got[2][MT_LOSS_SUM_LOSS], want[2][MT_LOSS_SUM_LOSS]);
        if (memcmp(gl, wl, sizeof(wl)) != 0)
            fail_msg("mesh %zu: training losses differ from one device", i);
    }
    set_free(&d);
}

/* Regression and binary heads on float targets: mse, mae and binary cross-entropy train on the
 * mesh to the weights of one device. */
static void test_loss_engines_float_targets_mesh_equals_one_device(void **state)
{
    static const char *const specs[] = {
        "{\"seed\":5,\"batch_size\":8,\"optimizer\":\"sgd\",\"learning_rate\":0.05,\"loss\":"
        "\"mse\",\"metrics\":[\"mae\"],\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":"
        "{\"dense_1\\\\.kernel\":[\"unsharded\",\"model\"]},\"model\":{\"input_shape\":[10],"
        "\"layers\":[{\"type\":\"dense\",\"units\":16,\"activation\":\"relu\"},{\"type\":\"dense\","
        "\"units\":2}]}}",
        "{\"seed\":5,\"batch_size\":8,\"optimizer\":\"sgd\",\"learning_rate\":0.05,\"loss\":"
        "\"mae\",\"mesh\":{\"batch\":4},\"model\":{\"input_shape\":[10],\"layers\":[{\"type\":"
        "\"dense\",\"units\":16,\"activation\":\"tanh\"},{\"type\":\"dense\",\"units\":2}]}}",
        "{\"seed\":5,\"batch_size\":8,\"optimizer\":\"sgd\",\"learning_rate\":0.05,\"loss\":"
        "\"binary_crossentropy\",\"metrics\":[\"binary_accuracy\",\"auc\"],\"mesh\":{\"batch\":4},"
        "\"model\":{\"input_shape\":[10],\"layers\":[{\"type\":\"dense\",\"units\":16,"
        "\"activation\":\"relu\"},{\"type\":\"dense\",\"units\":2}]}}",
    };
    size_t shape[1] = {10};
    set d;
    (void)state;
    d.dim = 10, d.tdim = 2, d.ydim = 1, d.y = NULL;
    d.x = mt_malloc(N * 10 * sizeof(float));
    d.t = mt_malloc(N * 2 * sizeof(float));
    for (size_t i = 0; i < N * 10; i++)
        d.x[i] = (float)cos(0.91 * (double)i);
    for (size_t e = 0; e < N; e++) { /* targets in [0, 1]: fit for the binary head too */
        d.t[2 * e] = d.x[e * 10] > 0 ? 1.0f : 0.0f;
        d.t[2 * e + 1] = 0.5f + 0.4f * d.x[e * 10 + 3];
    }
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        mesh_equals_one_device(specs[i], 1, shape, &d, 1e-5);
    /* binary cross-entropy on 0/1 class labels (one output): the labels are the targets */
    mt_free(d.t);
    d.t = NULL, d.tdim = 0;
    d.y = mt_malloc(N * sizeof(int32_t));
    for (size_t e = 0; e < N; e++)
        d.y[e] = d.x[e * 10 + 1] > 0.2f;
    mesh_equals_one_device(
        "{\"seed\":5,\"batch_size\":8,\"optimizer\":\"sgd\",\"learning_rate\":0.05,\"loss\":"
        "\"binary_crossentropy\",\"mesh\":{\"batch\":4},\"model\":{\"input_shape\":[10],"
        "\"layers\":[{\"type\":\"dense\",\"units\":8,\"activation\":\"relu\"},{\"type\":"
        "\"dense\",\"units\":1}]}}",
        1, shape, &d, 1e-5);
    set_free(&d);
}

static void test_loss_engines_refuse_unfit_data(void **state)
{
    const char *json = "{\"loss\":\"mse\",\"mesh\":{\"batch\":1},\"model\":{\"input_shape\":[4],"
                       "\"layers\":[{\"type\":\"dense\",\"units\":2}]}}";
    mt_spmd_config cfg;
    size_t shape[1] = {4};
    float x[8] = {0}, t[4] = {0};
    int32_t y[2] = {0, 1};
    mt_job_spec *spec = NULL;
    mt_spmd *s = NULL;
    mt_model *m = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_job_spec_parse(json, strlen(json), &spec, &err), MT_OK);
    assert_int_equal(mt_model_new(spec, 1, shape, 2, &m, &err), MT_OK);
    assert_int_equal(mt_model_check_data(m, 1, 0, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "loss: mse needs float targets (\"label_type\": \"float\"); the "
                                 "dataset has class labels");
    assert_int_equal(mt_model_train_step_targets(m, x, y, NULL, 2, 2, 0, 0, NULL, NULL, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "loss: mse needs the batch's targets"));
    assert_int_equal(mt_spmd_config_parse(json, strlen(json), &cfg, &err), MT_OK);
    assert_int_equal(mt_spmd_new(spec, cfg.mesh, cfg.layouts, 1, shape, 2, NULL, &s, &err), MT_OK);
    assert_int_equal(mt_spmd_check_data(s, 1, 3, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "the model outputs 2 values per example; the dataset has 3"));
    assert_int_equal(mt_spmd_step(s, x, y, 2, 0, 0, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "loss: mse needs the batch's float targets"));
    assert_int_equal(mt_spmd_step_targets(s, x, NULL, t, 2, 0, 0, NULL, &err), MT_OK);
    mt_spmd_free(s);
    mt_model_free(m);
    mt_spmd_config_fini(&cfg);
    mt_job_spec_free(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_loss_engines_per_pixel_mesh_equals_one_device, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_loss_engines_batch_split_invariance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loss_engines_mesh_invariant_eval, setup, teardown),
        cmocka_unit_test(test_loss_engines_float_targets_mesh_equals_one_device),
        cmocka_unit_test(test_loss_engines_refuse_unfit_data),
    };
    return MT_RUN_TESTS(tests);
}
