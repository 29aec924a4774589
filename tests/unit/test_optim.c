/* SPDX-License-Identifier: MIT */
/*
 * test_optim.c — core/optim (mt_optim.h): learning-rate schedules against their closed forms;
 * one update of each optimizer against Keras' formulas written out here; every optimizer with a
 * schedule and global-norm clipping on a sharded mesh (model-parallel and FSDP weights) equal to
 * the reference engine; a checkpoint resume continues the schedule with the same bits.
 */
#include "mt_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "model/mt_model.h"
#include "optim/mt_optim.h"
#include "spmd/mt_spmd.h"

static mt_optimizer_spec opt_of(const char *optimizer_json)
{
    char js[1024];
    mt_job_spec *s = NULL;
    mt_optimizer_spec o;
    mt_err err = MT_ERR_INIT;
    snprintf(js, sizeof(js),
             "{\"optimizer\":%s,\"model\":{\"layers\":[{\"type\":\"dense\",\"units\":2}]}}",
             optimizer_json);
    if (mt_job_spec_parse(js, strlen(js), &s, &err) != MT_OK)
        fail_msg("%s: %s", optimizer_json, err.msg);
    o = s->optimizer;
    mt_job_spec_free(s);
    return o;
}

static void test_schedules(void **state)
{
    mt_optimizer_spec o;
    (void)state;
    o = opt_of("{\"name\":\"sgd\",\"learning_rate\":0.1}");
    assert_true(mt_optim_lr(&o, 1) == 0.1f && mt_optim_lr(&o, 1000) == 0.1f);
    o = opt_of("{\"name\":\"adam\",\"learning_rate\":0.2,\"schedule\":{\"type\":\"cosine\","
               "\"decay_steps\":100,\"warmup_steps\":10,\"alpha\":0.1}}");
    assert_float_equal(mt_optim_lr(&o, 1), 0.02, 1e-7); /* warmup: 1/10 of the rate */
    assert_float_equal(mt_optim_lr(&o, 10), 0.2, 1e-7); /* end of the warmup */
    assert_float_equal(mt_optim_lr(&o, 11), 0.2, 1e-7); /* cosine at 0 */
    assert_float_equal(mt_optim_lr(&o, 61), 0.2 * (0.9 * 0.5 + 0.1), 1e-6); /* halfway */
    assert_float_equal(mt_optim_lr(&o, 111), 0.02, 1e-7); /* alpha · lr at the end, and after */
    assert_float_equal(mt_optim_lr(&o, 5000), 0.02, 1e-7);
    o = opt_of("{\"name\":\"sgd\",\"learning_rate\":1,\"schedule\":{\"type\":\"exponential\","
               "\"decay_steps\":10,\"decay_rate\":0.5}}");
    assert_float_equal(mt_optim_lr(&o, 6), pow(0.5, 0.5), 1e-6);
    o = opt_of("{\"name\":\"sgd\",\"learning_rate\":1,\"schedule\":{\"type\":\"step\","
               "\"decay_steps\":10,\"decay_rate\":0.5}}");
    assert_float_equal(mt_optim_lr(&o, 10), 1.0, 1e-7);
    assert_float_equal(mt_optim_lr(&o, 21), 0.25, 1e-7);
}

static void test_spec_errors(void **state)
{
    static const struct {
        const char *opt, *want;
    } cases[] = {
        {"{\"name\":\"adam\",\"rho\":0.5}", "optimizer.rho: only applies to rmsprop"},
        {"{\"name\":\"adam\",\"weight_decay\":0.1}",
         "optimizer.weight_decay: only applies to sgd and adamw"},
        {"{\"name\":\"adamw\",\"schedule\":{\"type\":\"cosine\"}}",
         "optimizer.schedule.decay_steps: is required"},
        {"{\"name\":\"adamw\",\"schedule\":{\"type\":\"linear\",\"decay_steps\":3}}",
         "optimizer.schedule.type: must be"},
        {"{\"name\":\"adamw\",\"schedule\":{\"type\":\"step\",\"decay_steps\":3,\"rate\":2}}",
         "optimizer.schedule.rate: unknown field"},
        {"{\"name\":\"sgd\",\"global_clipnorm\":0}", "optimizer.global_clipnorm: must be"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char js[512];
        mt_job_spec *s = NULL;
        mt_err err = MT_ERR_INIT;
        snprintf(js, sizeof(js),
                 "{\"optimizer\":%s,\"model\":{\"layers\":[{\"type\":\"dense\",\"units\":2}]}}",
                 cases[i].opt);
        assert_int_equal(mt_job_spec_parse(js, strlen(js), &s, &err), MT_INVALID_ARGUMENT);
        if (strstr(err.msg, cases[i].want) == NULL)
            fail_msg("%s: got '%s', want '%s'", cases[i].opt, err.msg, cases[i].want);
    }
}

/* One update of 3 elements, checked against the optimizer's formula in double. */
static void test_updates(void **state)
{
    const float g0[3] = {0.5f, -1.0f, 2.0f}, w0[3] = {1.0f, -2.0f, 0.25f};
    (void)state;
    { /* adamw: w -= lr wd w; then Adam's first step moves by lr · g / (|g| + eps') */
        mt_optimizer_spec o = opt_of("{\"name\":\"adamw\",\"learning_rate\":0.1,"
                                     "\"weight_decay\":0.5}");
        float w[3], m[3] = {0}, v[3] = {0}, g[3];
        memcpy(w, w0, sizeof(w));
        memcpy(g, g0, sizeof(g));
        mt_optim_apply(&o, 1, 1.0f, w, m, v, g, 3);
        for (int i = 0; i < 3; i++) {
            double dw = w0[i] - w0[i] * 0.05;
            double want = dw - 0.1 * g0[i] / (fabs(g0[i]) + 1e-7 / sqrt(1 - 0.999));
            assert_float_equal(w[i], want, 1e-5);
        }
    }
    { /* sgd with weight decay: w -= lr wd w; then w -= lr g (L2 regularisation) */
        mt_optimizer_spec o = opt_of("{\"name\":\"sgd\",\"learning_rate\":0.1,"
                                     "\"weight_decay\":0.5}");
        float w[3], g[3];
        memcpy(w, w0, sizeof(w));
        memcpy(g, g0, sizeof(g));
        mt_optim_apply(&o, 1, 1.0f, w, NULL, NULL, g, 3);
        for (int i = 0; i < 3; i++)
            assert_float_equal(w[i], w0[i] - 0.1 * (0.5 * w0[i] + g0[i]), 1e-6);
        assert_float_equal(opt_of("{\"name\":\"sgd\"}").weight_decay, 0.0, 0.0);
        assert_float_equal(opt_of("\"adamw\"").weight_decay, 0.004, 1e-9);
    }
    { /* rmsprop, Keras 3: v = rho v + (1 - rho) g²; w -= lr g / sqrt(v + eps) */
        mt_optimizer_spec o = opt_of("{\"name\":\"rmsprop\",\"learning_rate\":0.01}");
        float w[3], v[3] = {0}, g[3];
        memcpy(w, w0, sizeof(w));
        memcpy(g, g0, sizeof(g));
        mt_optim_apply(&o, 1, 1.0f, w, v, NULL, g, 3);
        for (int i = 0; i < 3; i++)
            assert_float_equal(w[i], w0[i] - 0.01 * g0[i] / sqrt(0.1 * g0[i] * g0[i] + 1e-7), 1e-6);
    }
    { /* adagrad: acc starts at 0.1; acc += g²; w -= lr g / sqrt(acc + eps) */
        mt_optimizer_spec o = opt_of("{\"name\":\"adagrad\",\"learning_rate\":0.01}");
        float w[3], a[3], g[3];
        memcpy(w, w0, sizeof(w));
        memcpy(g, g0, sizeof(g));
        mt_optim_init_slots(&o, a, NULL, 3);
        assert_float_equal(a[0], 0.1, 1e-9);
        mt_optim_apply(&o, 1, 1.0f, w, a, NULL, g, 3);
        for (int i = 0; i < 3; i++)
            assert_float_equal(w[i], w0[i] - 0.01 * g0[i] / sqrt(0.1 + g0[i] * g0[i] + 1e-7), 1e-6);
    }
    { /* sgd nesterov, Keras: v = m v - lr g; w += m v - lr g (two steps) */
        mt_optimizer_spec o = opt_of("{\"name\":\"sgd\",\"learning_rate\":0.1,\"momentum\":0.9,"
                                     "\"nesterov\":true}");
        float w[3], v[3] = {0}, g[3];
        memcpy(w, w0, sizeof(w));
        for (int t = 1; t <= 2; t++) {
            memcpy(g, g0, sizeof(g));
            mt_optim_apply(&o, t, 1.0f, w, v, NULL, g, 3);
        }
        for (int i = 0; i < 3; i++) {
            double vv = -0.1 * g0[i], ww = w0[i] + 0.9 * vv - 0.1 * g0[i];
            vv = 0.9 * vv - 0.1 * g0[i];
            ww += 0.9 * vv - 0.1 * g0[i];
            assert_float_equal(w[i], ww, 1e-6);
        }
    }
    { /* clipping: norm 3 clipped to 1.5 halves every gradient */
        mt_optimizer_spec o = opt_of("{\"name\":\"sgd\",\"global_clipnorm\":1.5}");
        assert_float_equal(mt_optim_clip_scale(&o, 9.0), 0.5, 1e-7);
        assert_float_equal(mt_optim_clip_scale(&o, 1.0), 1.0, 0.0);
    }
}

/* ------------------------------------------------------------------ on a mesh */

#define GB 8
#define NX 32
#define IN 6

#define MESH_SPEC(opt)                                                                             \
    "{\"seed\":5,\"batch_size\":8,\"optimizer\":" opt ",\"model\":{\"input_shape\":[6],"           \
    "\"layers\":[{\"type\":\"dense\",\"units\":8,\"activation\":\"relu\"},{\"type\":\"dense\","    \
    "\"units\":8,\"activation\":\"tanh\"},{\"type\":\"dense\",\"units\":3}]},"                     \
    "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\","       \
    "\"model\"],\"dense_2\\\\.kernel\":[\"model\",\"batch\"],\"dense_3\\\\.kernel\":[\"batch\","   \
    "\"unsharded\"]}}"

static void data(float *x, int32_t *y)
{
    uint64_t s = 7;
    for (size_t i = 0; i < NX * IN; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)((s >> 11) % 100003) / 50000.0 - 1.0);
    }
    for (size_t i = 0; i < NX; i++)
        y[i] = (int32_t)(i * 7 % 3);
}

static mt_spmd *mesh_open(const char *js, mt_job_spec **spec, mt_spmd_config *cfg)
{
    mt_spmd *s = NULL;
    mt_err err = MT_ERR_INIT;
    size_t in[1] = {IN};
    assert_int_equal(mt_job_spec_parse(js, strlen(js), spec, &err), MT_OK);
    assert_int_equal(mt_spmd_config_parse(js, strlen(js), cfg, &err), MT_OK);
    if (mt_spmd_new(*spec, cfg->mesh, cfg->layouts, 1, in, GB, NULL, &s, &err) != MT_OK)
        fail_msg("mt_spmd_new: %s", err.msg);
    return s;
}

static void mesh_steps(mt_spmd *s, const float *x, const int32_t *y, int from, int to)
{
    mt_err err = MT_ERR_INIT;
    for (int k = from; k < to; k++) {
        size_t first = ((size_t)k * GB) % NX;
        if (mt_spmd_step(s, x + first * IN, y + first, GB, (uint64_t)k, first, NULL, &err) != MT_OK)
            fail_msg("step %d: %s", k, err.msg);
    }
}

static void check_mesh(const char *js)
{
    float x[NX * IN];
    int32_t y[NX];
    mt_job_spec *spec;
    mt_spmd_config cfg;
    mt_spmd *s;
    mt_model *m = NULL;
    mt_err err = MT_ERR_INIT;
    size_t in[1] = {IN};

    data(x, y);
    s = mesh_open(js, &spec, &cfg);
    mesh_steps(s, x, y, 0, 6);
    assert_int_equal(mt_model_new(spec, 1, in, GB, &m, &err), MT_OK);
    mt_model_use_reference_kernels(m, true);
    for (int k = 0; k < 6; k++) {
        size_t first = ((size_t)k * GB) % NX;
        assert_int_equal(mt_model_train_step(m, x + first * IN, y + first, GB, GB, (uint64_t)k,
                                             first, NULL, NULL, &err),
                         MT_OK);
    }
    for (size_t i = 0; i < mt_model_param_count(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        float g[64];
        double d = 0.0, v = 1e-12;
        assert_true(p->size <= 64);
        assert_int_equal(mt_spmd_param_gather(s, p->name, g, &err), MT_OK);
        for (size_t e = 0; e < p->size; e++) {
            d = fmax(d, fabs((double)g[e] - p->value[e]));
            v = fmax(v, fabs((double)p->value[e]));
        }
        if (d / v > 1e-5)
            fail_msg("%s: %s differs from one device by %.3g", js, p->name, d / v);
    }
    mt_model_free(m);
    mt_spmd_free(s);
    mt_spmd_config_fini(&cfg);
    mt_job_spec_free(spec);
}

static void test_mesh_equals_reference(void **state)
{
    (void)state;
    check_mesh(MESH_SPEC("{\"name\":\"adamw\",\"learning_rate\":0.01,\"weight_decay\":0.1,"
                         "\"global_clipnorm\":0.5,\"schedule\":{\"type\":\"cosine\","
                         "\"decay_steps\":4,\"warmup_steps\":2}}"));
    check_mesh(MESH_SPEC("{\"name\":\"rmsprop\",\"learning_rate\":0.01,\"global_clipnorm\":0.2}"));
    check_mesh(MESH_SPEC("{\"name\":\"adagrad\",\"learning_rate\":0.05,"
                         "\"schedule\":{\"type\":\"exponential\",\"decay_steps\":2,"
                         "\"decay_rate\":0.5,\"staircase\":true}}"));
    check_mesh(MESH_SPEC("{\"name\":\"sgd\",\"learning_rate\":0.05,\"momentum\":0.9,"
                         "\"nesterov\":true,\"schedule\":{\"type\":\"step\",\"decay_steps\":3}}"));
}

/* 3 steps, a checkpoint, a new trainer restored from it, 3 more: the bits of 6 straight. */
static void test_resume_continues_schedule(void **state)
{
    const char *js = MESH_SPEC("{\"name\":\"adamw\",\"learning_rate\":0.01,"
                               "\"schedule\":{\"type\":\"cosine\",\"decay_steps\":4,"
                               "\"warmup_steps\":2}}");
    float x[NX * IN];
    int32_t y[NX];
    mt_job_spec *sa, *sb;
    mt_spmd_config ca, cb;
    mt_spmd *a, *b;
    mt_err err = MT_ERR_INIT;
    char path[64];
    (void)state;

    data(x, y);
    snprintf(path, sizeof(path), "/tmp/mt-test-optim-%d.mtc", (int)getpid());
    a = mesh_open(js, &sa, &ca);
    mesh_steps(a, x, y, 0, 3);
    assert_int_equal(mt_spmd_save(a, path, NULL, js, &err), MT_OK);
    mesh_steps(a, x, y, 3, 6);
    b = mesh_open(js, &sb, &cb);
    if (mt_spmd_restore(b, path, NULL, &err) != MT_OK)
        fail_msg("restore: %s", err.msg);
    mesh_steps(b, x, y, 3, 6);
    for (size_t i = 0; i < mt_spmd_param_count(a); i++) {
        const mt_model_param *p = mt_spmd_param(a, 0, i);
        float ga[64], gb[64];
        size_t n = 1;
        for (int d = 0; d < p->rank; d++)
            n *= p->shape[d];
        assert_true(n <= 64);
        assert_int_equal(mt_spmd_param_gather(a, p->name, ga, &err), MT_OK);
        assert_int_equal(mt_spmd_param_gather(b, p->name, gb, &err), MT_OK);
        if (memcmp(ga, gb, n * sizeof(float)) != 0)
            fail_msg("%s: the resumed run differs from the straight one", p->name);
    }
    unlink(path);
    mt_spmd_free(a);
    mt_spmd_free(b);
    mt_spmd_config_fini(&ca);
    mt_spmd_config_fini(&cb);
    mt_job_spec_free(sa);
    mt_job_spec_free(sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_updates),
        cmocka_unit_test(test_mesh_equals_reference),
        cmocka_unit_test(test_resume_continues_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
