/* SPDX-License-Identifier: MIT */
/* test_loss.c — core/loss (mt_loss.h): every loss's gradient against central finite differences
 * (fast and reference paths, with label smoothing, per-row labels), the default loss equal to the
 * fused kernel bit for bit, metrics, the histogram AUC against the exact pairwise AUC, the spec
 * sections and their errors, the fit check, early-stopping bookkeeping. */
#include "mt_test.h"

#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "loss/mt_loss.h"
#include "tensor/mt_tensor.h"

static mt_loss_spec spec_of(const char *loss, const char *metrics)
{
    cJSON *l = loss != NULL ? cJSON_Parse(loss) : NULL, *m = metrics ? cJSON_Parse(metrics) : NULL;
    mt_loss_spec s;
    mt_err err = MT_ERR_INIT;
    if (mt_loss_spec_parse(l, m, &s, &err) != MT_OK)
        fail_msg("%s / %s: %s", loss, metrics, err.msg);
    cJSON_Delete(l);
    cJSON_Delete(m);
    return s;
}

/* The loss of b (no gradient), in double. */
static double loss_of(const mt_loss_spec *ls, const mt_loss_shape *sh, const mt_loss_batch *b,
                      bool ref)
{
    double sums[MT_LOSS_NSUMS] = {0};
    assert_int_equal(mt_loss_forward(ls, sh, b, ref, NULL, sums, NULL, NULL), MT_OK);
    return sums[MT_LOSS_SUM_LOSS];
}

/* d(loss)/d(out) with grad_scale 1 against central differences of the summed loss. */
static void fd_check(const char *loss, const mt_loss_shape *sh, size_t n, const int32_t *labels,
                     const float *targets)
{
    mt_loss_spec ls = spec_of(loss, "[]");
    size_t m = n * sh->rows * sh->c;
    float out[64], d[64];
    for (int ref = 0; ref < 2; ref++) {
        mt_loss_batch b = {out, n, labels, targets, 1.0f};
        double sums[MT_LOSS_NSUMS] = {0};
        for (size_t i = 0; i < m; i++)
            out[i] = (float)sin(1.3 * (double)i + 0.4) * 2.0f;
        assert_int_equal(mt_loss_forward(&ls, sh, &b, ref, d, sums, NULL, NULL), MT_OK);
        for (size_t i = 0; i < m; i++) {
            float keep = out[i], h = 1e-2f;
            double fp, fm, num;
            out[i] = keep + h;
            fp = loss_of(&ls, sh, &b, true);
            out[i] = keep - h;
            fm = loss_of(&ls, sh, &b, true);
            out[i] = keep;
            num = (fp - fm) / (2.0 * (double)h);
            if (fabs(num - (double)d[i]) > 2e-3 + 2e-3 * fabs(num))
                fail_msg("%s ref=%d: d[%zu] = %g, finite difference %g", loss, ref, i, (double)d[i],
                         num);
        }
    }
}

static void test_loss_gradients_match_finite_differences(void **state)
{
    int32_t y6[6] = {2, 0, 1, 3, 3, 0}, bin[6] = {1, 0, 0, 1, 1, 0};
    float t6[6] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.3f}, p6[6] = {1, 0, 0.3f, 1, 0.9f, 0};
    mt_loss_shape rows = {3, 4}, one = {1, 4}, outs = {1, 3}, bin1 = {1, 1};
    (void)state;
    fd_check("\"sparse_categorical_crossentropy\"", &one, 2, y6, NULL);
    fd_check("\"sparse_categorical_crossentropy\"", &rows, 2, y6, NULL); /* 3 labels per example */
    fd_check("{\"name\":\"sparse_categorical_crossentropy\",\"label_smoothing\":0.2}", &rows, 2, y6,
             NULL);
    fd_check("\"binary_crossentropy\"", &outs, 2, NULL, p6);
    fd_check("{\"name\":\"binary_crossentropy\",\"label_smoothing\":0.1}", &outs, 2, NULL, p6);
    fd_check("\"binary_crossentropy\"", &bin1, 6, bin, NULL); /* 0/1 class labels */
    fd_check("\"mse\"", &outs, 2, NULL, t6);
    fd_check("\"mean_absolute_error\"", &outs, 2, NULL, t6);
}

/* The default loss over (n·rows, c) is core/tensor's fused kernel, bit for bit. */
static void test_loss_default_is_the_fused_kernel(void **state)
{
    mt_loss_spec ls = MT_LOSS_SPEC_DEFAULTS;
    mt_loss_shape sh = {1, 5};
    float out[40], d1[40], d2[40];
    int32_t y[8] = {0, 4, 2, 1, 3, 3, 0, 2};
    double sums[MT_LOSS_NSUMS] = {0}, loss = 0.0;
    size_t correct = 0;
    mt_loss_batch b = {out, 8, y, NULL, 0};
    (void)state;
    for (int i = 0; i < 40; i++)
        out[i] = (float)cos(0.7 * i);
    b.grad_scale = mt_loss_grad_scale(&ls, &sh, 8);
    assert_true(b.grad_scale == 1.0f / 8.0f);
    assert_int_equal(mt_loss_forward(&ls, &sh, &b, false, d1, sums, NULL, NULL), MT_OK);
    assert_int_equal(mt_softmax_xent(d2, &loss, &correct, out, y, 8, 5, 1.0f / 8.0f, NULL), MT_OK);
    assert_memory_equal(d1, d2, sizeof(d1));
    assert_true(sums[MT_LOSS_SUM_LOSS] == loss);
    assert_true(sums[MT_LOSS_SUM_CORRECT] == (double)correct);
}

/* Per-row labels: the loss of (2, 3 rows) equals the one of 6 examples with one row each, and
 * the mean divides by every label (examples · rows). */
static void test_loss_rows_are_labels(void **state)
{
    mt_loss_spec ls = spec_of("\"sparse_categorical_crossentropy\"", "[\"accuracy\",\"perplexity\","
                                                                     "\"token_accuracy\"]");
    mt_loss_shape rows = {3, 4}, one = {1, 4};
    float out[24];
    int32_t y[6] = {1, 2, 3, 0, 1, 2};
    double a[MT_LOSS_NSUMS] = {0}, b[MT_LOSS_NSUMS] = {0};
    mt_loss_batch br = {out, 2, y, NULL, 1.0f}, bo = {out, 6, y, NULL, 1.0f};
    mt_metrics m;
    (void)state;
    for (int i = 0; i < 24; i++)
        out[i] = (float)(i % 5) * 0.3f;
    assert_int_equal(mt_loss_units(&ls, &rows), 3);
    assert_int_equal(mt_loss_forward(&ls, &rows, &br, false, NULL, a, NULL, NULL), MT_OK);
    assert_int_equal(mt_loss_forward(&ls, &one, &bo, false, NULL, b, NULL, NULL), MT_OK);
    assert_memory_equal(a, b, sizeof(a));
    mt_loss_metrics(&ls, &rows, a, NULL, 2.0, &m);
    assert_true(fabs(m.loss - a[MT_LOSS_SUM_LOSS] / 6.0) < 1e-12);
    assert_true(fabs(m.value[MT_METRIC_PERPLEXITY] - exp(m.loss)) < 1e-9);
    assert_true(m.value[MT_METRIC_ACCURACY] == a[MT_LOSS_SUM_CORRECT] / 6.0);
    assert_true(m.value[MT_METRIC_TOKEN_ACCURACY] == m.value[MT_METRIC_ACCURACY]);
    assert_true(mt_loss_grad_scale(&ls, &rows, 2) == 1.0f / 6.0f);
    /* a label out of range names its example and row */
    {
        mt_err err = MT_ERR_INIT;
        y[4] = 4;
        assert_int_equal(mt_loss_forward(&ls, &rows, &br, false, NULL, a, NULL, &err),
                         MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "label 4 of example 1 (row 1) not in [0, 4)"));
    }
}

/* The exact AUC: the fraction of (positive, negative) pairs ordered right, ties half. */
static double exact_auc(const double *p, const int *y, int n)
{
    double good = 0, pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (y[i] == 1 && y[j] == 0) {
                pairs += 1;
                good += p[i] > p[j] ? 1.0 : p[i] == p[j] ? 0.5 : 0.0;
            }
    return good / pairs;
}

static void test_loss_metrics_and_auc(void **state)
{
    mt_loss_spec ls = spec_of("\"binary_crossentropy\"", "[\"binary_accuracy\",\"auc\",\"mae\","
                                                         "\"mse\"]");
    mt_loss_shape sh = {1, 1};
    enum { N = 200 };
    float z[N], t[N];
    double p[N], sums[MT_LOSS_NSUMS] = {0}, hist[2 * MT_LOSS_AUC_BINS] = {0}, ok = 0, ab = 0;
    int y[N];
    mt_loss_batch b = {z, N, NULL, t, 1.0f};
    mt_metrics m;
    char line[256];
    (void)state;
    for (int i = 0; i < N; i++) {
        y[i] = (i * 7919) % 3 == 0;
        z[i] = (float)(sin(i * 12.9898) * 3.0 + (y[i] ? 1.0 : -0.5));
        t[i] = (float)y[i];
        p[i] = 1.0 / (1.0 + exp(-(double)z[i]));
        ok += (p[i] > 0.5) == (y[i] == 1);
        ab += fabs(p[i] - y[i]);
    }
    assert_int_equal(mt_loss_forward(&ls, &sh, &b, false, NULL, sums, hist, NULL), MT_OK);
    mt_loss_metrics(&ls, &sh, sums, hist, N, &m);
    assert_true(fabs(m.value[MT_METRIC_BINARY_ACCURACY] - ok / N) < 1e-12);
    assert_true(fabs(m.value[MT_METRIC_MAE] - ab / N) < 1e-9);
    /* 200 bins: within 1% of the exact pairwise AUC here */
    assert_true(fabs(m.value[MT_METRIC_AUC] - exact_auc(p, y, N)) < 0.01);
    assert_true(m.mask & (1u << MT_METRIC_AUC));
    /* no histogram (a training step): auc is left out */
    mt_loss_metrics(&ls, &sh, sums, NULL, N, &m);
    assert_false(m.mask & (1u << MT_METRIC_AUC));
    mt_metrics_format(&m, "val_", line, sizeof(line));
    assert_non_null(strstr(line, " - val_loss: "));
    assert_non_null(strstr(line, " - val_binary_accuracy: "));
    assert_null(strstr(line, "auc"));
    /* one class only: 0.5 */
    memset(hist, 0, sizeof(hist));
    hist[1] = 4;
    assert_true(mt_loss_auc(hist) == 0.5);
}

static void test_loss_spec_defaults_and_errors(void **state)
{
    static const struct {
        const char *loss, *metrics, *msg;
    } bad[] = {
        {"\"hinge\"", NULL, "loss: unknown loss 'hinge' (sparse_categorical_crossentropy"},
        {"3", NULL, "loss: must be a loss name"},
        {"{\"name\":\"mse\",\"label_smoothing\":0.1}", NULL,
         "loss.label_smoothing: only for the cross-entropies"},
        {"{\"name\":\"binary_crossentropy\",\"label_smoothing\":1}", NULL,
         "loss.label_smoothing: must be a number in [0, 1)"},
        {"{\"name\":\"mse\",\"from\":1}", NULL, "loss.from: unknown field"},
        {"\"mse\"", "[\"auc\"]", "metrics[0]: auc needs \"loss\": \"binary_crossentropy\""},
        {NULL, "[\"mae\"]", "metrics[0]: mae needs predictions of the targets"},
        {NULL, "\"accuracy\"", "metrics: must be a list"},
        {NULL, "[\"accuracy\", 3]", "metrics[1]: unknown metric (not a string)"},
    };
    mt_loss_spec s;
    (void)state;
    s = spec_of(NULL, NULL);
    assert_int_equal(s.kind, MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    assert_int_equal(s.metrics, 1u << MT_METRIC_ACCURACY);
    s = spec_of("\"mean_squared_error\"", NULL);
    assert_int_equal(s.kind, MT_LOSS_MSE);
    assert_int_equal(s.metrics, 0);
    assert_string_equal(mt_loss_name(s.kind), "mse");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *l = bad[i].loss ? cJSON_Parse(bad[i].loss) : NULL;
        cJSON *m = bad[i].metrics ? cJSON_Parse(bad[i].metrics) : NULL;
        mt_err err = MT_ERR_INIT;
        assert_int_equal(mt_loss_spec_parse(l, m, &s, &err), MT_INVALID_ARGUMENT);
        if (strncmp(err.msg, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("case %zu: '%s', want '%s'", i, err.msg, bad[i].msg);
        cJSON_Delete(l);
        cJSON_Delete(m);
    }
}

static void test_loss_check_fit(void **state)
{
    mt_loss_spec cce = MT_LOSS_SPEC_DEFAULTS, mse = spec_of("\"mse\"", NULL),
                 bce = spec_of("\"binary_crossentropy\"", NULL);
    mt_loss_shape vec = {1, 10}, pix = {16, 3}, one = {1, 1};
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_loss_check(&cce, &vec, 1, 0, &err), MT_OK);
    assert_int_equal(mt_loss_check(&cce, &pix, 16, 0, &err), MT_OK);
    assert_int_equal(mt_loss_check(&cce, &pix, 1, 0, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "loss: the model outputs 16 rows of 3 classes per example; the "
                                 "dataset has 1 class label per example");
    assert_int_equal(mt_loss_check(&cce, &vec, 1, 1, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "needs class labels; the dataset has 1 float target"));
    assert_int_equal(mt_loss_check(&mse, &one, 1, 0, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "loss: mse needs float targets"));
    assert_int_equal(mt_loss_check(&mse, &vec, 1, 3, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "the model outputs 10 values per example; the dataset has 3"));
    assert_int_equal(mt_loss_check(&mse, &one, 1, 1, &err), MT_OK);
    assert_int_equal(mt_loss_check(&bce, &one, 1, 0, &err), MT_OK); /* 0/1 labels */
    assert_int_equal(mt_loss_check(&bce, &vec, 1, 0, &err), MT_INVALID_ARGUMENT);
}

static void test_loss_validation_and_stopping(void **state)
{
    mt_loss_spec ls = MT_LOSS_SPEC_DEFAULTS;
    mt_validation_spec v;
    mt_metrics tr = {0}, va = {0};
    cJSON *n = cJSON_Parse("{\"split\":0.2,\"every_steps\":5,\"early_stopping\":{\"monitor\":"
                           "\"val_accuracy\",\"patience\":2,\"min_delta\":0.01},\"best\":{}}");
    mt_err err = MT_ERR_INIT;
    double x;
    (void)state;
    assert_int_equal(mt_loss_validation_parse(n, &ls, &v, &err), MT_OK);
    assert_true(v.enabled && v.split == 0.2 && v.every_steps == 5 && v.patience == 2);
    assert_string_equal(v.stop.name, "val_accuracy");
    assert_int_equal(v.stop.mode, MT_MONITOR_MAX); /* auto: accuracy grows */
    assert_string_equal(v.best.name, "val_loss");
    assert_int_equal(v.best.mode, MT_MONITOR_MIN);
    va.mask = 1u << MT_METRIC_ACCURACY;
    va.value[MT_METRIC_ACCURACY] = 0.7;
    va.loss = 0.4;
    assert_true(mt_loss_monitor_value(&v.stop, &tr, &va, &x) && x == 0.7);
    assert_false(mt_loss_monitor_value(&v.stop, &tr, NULL, &x));
    assert_true(mt_loss_monitor_improves(&v.stop, 0.7, NAN));
    assert_false(mt_loss_monitor_improves(&v.stop, 0.705, 0.7)); /* within min_delta */
    assert_true(mt_loss_monitor_improves(&v.stop, 0.72, 0.7));
    assert_true(mt_loss_monitor_improves(&v.best, 0.3, 0.4));
    cJSON_Delete(n);
    n = cJSON_Parse("{\"path\":\"v.csv\",\"best\":{\"monitor\":\"val_loss\",\"mode\":\"up\"}}");
    assert_int_equal(mt_loss_validation_parse(n, &ls, &v, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "validation.best.mode: must be \"auto\", \"min\" or \"max\"");
    cJSON_Delete(n);
    n = cJSON_Parse("{\"split\":0.1,\"every_steps\":0}");
    assert_int_equal(mt_loss_validation_parse(n, &ls, &v, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "validation.every_steps: must be a positive integer");
    cJSON_Delete(n);
    assert_int_equal(mt_loss_validation_parse(NULL, &ls, &v, &err), MT_OK);
    assert_false(v.enabled);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_gradients_match_finite_differences),
        cmocka_unit_test(test_loss_default_is_the_fused_kernel),
        cmocka_unit_test(test_loss_rows_are_labels),
        cmocka_unit_test(test_loss_metrics_and_auc),
        cmocka_unit_test(test_loss_spec_defaults_and_errors),
        cmocka_unit_test(test_loss_check_fit),
        cmocka_unit_test(test_loss_validation_and_stopping),
    };
    return MT_RUN_TESTS(tests);
}
