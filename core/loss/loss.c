/* SPDX-License-Identifier: MIT */
/*
 * loss.c — losses, metrics and the "loss" / "metrics" / "validation" spec sections (contract in
 * mt_loss.h).
 *
 * DESIGN: every loss works on the (rows, c) view of a batch's outputs and adds plain sums
 * (mt_loss_forward), so the engines only allreduce a fixed vector and divide at the end. The
 * default loss without label smoothing calls core/tensor's fused softmax cross-entropy over
 * n·rows rows, so its bits are the engine's before this module. The other losses are written once
 * with float math in the fast path and double accumulation in the reference (ref) path.
 * Threading: pure. Tests: tests/unit/test_loss.c.
 */
#include "loss/mt_loss.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tensor/mt_tensor.h"

/* ------------------------------------------------------------------ names */

static const struct {
    const char *name;
    mt_loss_kind kind;
} loss_names[] = {
    {"sparse_categorical_crossentropy", MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
    {"binary_crossentropy", MT_LOSS_BINARY_CROSSENTROPY},
    {"mse", MT_LOSS_MSE},
    {"mean_squared_error", MT_LOSS_MSE},
    {"mae", MT_LOSS_MAE},
    {"mean_absolute_error", MT_LOSS_MAE},
};

#define N_LOSS_NAMES (sizeof(loss_names) / sizeof(loss_names[0]))

static const char *const metric_names[MT_METRIC_COUNT] = {
    "accuracy", "binary_accuracy", "mae", "mse", "auc", "perplexity", "token_accuracy"};

const char *mt_metric_report_name(mt_metric_group g, int m)
{
    static const char *const names[3][MT_METRIC_COUNT + 1] = {
        {"loss", "accuracy", "binary_accuracy", "mae", "mse", "auc", "perplexity",
         "token_accuracy"},
        {"val_loss", "val_accuracy", "val_binary_accuracy", "val_mae", "val_mse", "val_auc",
         "val_perplexity", "val_token_accuracy"},
        {"test_loss", "test_accuracy", "test_binary_accuracy", "test_mae", "test_mse", "test_auc",
         "test_perplexity", "test_token_accuracy"},
    };
    if ((unsigned)g > MT_METRIC_GROUP_TEST || m < -1 || m >= MT_METRIC_COUNT)
        return "?";
    return names[g][m + 1];
}

const char *mt_loss_name(mt_loss_kind k)
{
    for (size_t i = 0; i < N_LOSS_NAMES; i++)
        if (loss_names[i].kind == k)
            return loss_names[i].name;
    return "?";
}

const char *mt_metric_name(mt_metric_kind m)
{
    return (unsigned)m < MT_METRIC_COUNT ? metric_names[m] : "?";
}

static bool is_cross_entropy(mt_loss_kind k)
{
    return k == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY || k == MT_LOSS_BINARY_CROSSENTROPY;
}

/* ------------------------------------------------------------------ "loss" and "metrics" */

static mt_code parse_loss_name(const char *s, const char *path, mt_loss_kind *out, mt_err *err)
{
    for (size_t i = 0; i < N_LOSS_NAMES; i++)
        if (strcmp(s, loss_names[i].name) == 0) {
            *out = loss_names[i].kind;
            return MT_OK;
        }
    return mt_err_set(
        err, MT_INVALID_ARGUMENT,
        "%s: unknown loss '%s' (sparse_categorical_crossentropy, binary_crossentropy, "
        "mse, mean_squared_error, mae, mean_absolute_error)",
        path, s);
}

static mt_code parse_loss(const cJSON *n, mt_loss_spec *out, mt_err *err)
{
    const cJSON *name, *ls;

    if (n == NULL)
        return MT_OK;
    if (cJSON_IsString(n))
        return parse_loss_name(n->valuestring, "loss", &out->kind, err);
    if (!cJSON_IsObject(n))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "loss: must be a loss name or {\"name\": ..., \"label_smoothing\": x}");
    for (const cJSON *c = n->child; c != NULL; c = c->next)
        if (strcmp(c->string, "name") != 0 && strcmp(c->string, "label_smoothing") != 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss.%s: unknown field (name, label_smoothing)", c->string);
    name = cJSON_GetObjectItemCaseSensitive(n, "name");
    if (!cJSON_IsString(name))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "loss.name: must be a loss name");
    if (parse_loss_name(name->valuestring, "loss.name", &out->kind, err) != MT_OK)
        return MT_INVALID_ARGUMENT;
    ls = cJSON_GetObjectItemCaseSensitive(n, "label_smoothing");
    if (ls != NULL) {
        if (!cJSON_IsNumber(ls) || !(ls->valuedouble >= 0.0) || ls->valuedouble >= 1.0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss.label_smoothing: must be a number in [0, 1)");
        if (!is_cross_entropy(out->kind) && ls->valuedouble != 0.0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss.label_smoothing: only for the cross-entropies, not %s",
                              mt_loss_name(out->kind));
        out->label_smoothing = (float)ls->valuedouble;
    }
    return MT_OK;
}

/* Whether metric m makes sense for loss k (the message says why not). */
static const char *metric_unfit(mt_metric_kind m, mt_loss_kind k)
{
    switch (m) {
    case MT_METRIC_ACCURACY:
    case MT_METRIC_TOKEN_ACCURACY:
    case MT_METRIC_PERPLEXITY:
        return k == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
                   ? NULL
                   : "needs \"loss\": \"sparse_categorical_crossentropy\" (class labels)";
    case MT_METRIC_AUC:
        return k == MT_LOSS_BINARY_CROSSENTROPY ? NULL : "needs \"loss\": \"binary_crossentropy\"";
    case MT_METRIC_BINARY_ACCURACY:
    case MT_METRIC_MAE:
    case MT_METRIC_MSE:
        return k == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
                   ? "needs predictions of the targets (binary_crossentropy, mse or mae)"
                   : NULL;
    case MT_METRIC_COUNT:
        break;
    }
    return "is not a metric";
}

static mt_code parse_metrics(const cJSON *n, mt_loss_spec *out, mt_err *err)
{
    int i = 0;

    if (n == NULL) {
        out->metrics =
            out->kind == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? 1u << MT_METRIC_ACCURACY : 0;
        return MT_OK;
    }
    if (!cJSON_IsArray(n))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "metrics: must be a list of metric names");
    out->metrics = 0;
    for (const cJSON *c = n->child; c != NULL; c = c->next, i++) {
        int m = -1;
        const char *why;
        for (int k = 0; cJSON_IsString(c) && k < MT_METRIC_COUNT; k++)
            if (strcmp(c->valuestring, metric_names[k]) == 0)
                m = k;
        if (m < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "metrics[%d]: unknown metric %s%s%s (accuracy, binary_accuracy, mae, "
                              "mse, auc, perplexity, token_accuracy)",
                              i, cJSON_IsString(c) ? "'" : "",
                              cJSON_IsString(c) ? c->valuestring : "(not a string)",
                              cJSON_IsString(c) ? "'" : "");
        why = metric_unfit((mt_metric_kind)m, out->kind);
        if (why != NULL)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "metrics[%d]: %s %s", i, metric_names[m],
                              why);
        out->metrics |= 1u << m;
    }
    return MT_OK;
}

mt_code mt_loss_spec_parse(const cJSON *loss, const cJSON *metrics, mt_loss_spec *out, mt_err *err)
{
    const mt_loss_spec d = MT_LOSS_SPEC_DEFAULTS;
    mt_code rc;

    *out = d;
    rc = parse_loss(loss, out, err);
    if (rc == MT_OK)
        rc = parse_metrics(metrics, out, err);
    return rc;
}

/* ------------------------------------------------------------------ fitting */

size_t mt_loss_units(const mt_loss_spec *ls, const mt_loss_shape *sh)
{
    return ls->kind == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? sh->rows : sh->rows * sh->c;
}

bool mt_loss_uses_targets(const mt_loss_spec *ls, size_t t_dim)
{
    return ls->kind == MT_LOSS_MSE || ls->kind == MT_LOSS_MAE ||
           (ls->kind == MT_LOSS_BINARY_CROSSENTROPY && t_dim > 0);
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

mt_code mt_loss_check(const mt_loss_spec *ls, const mt_loss_shape *sh, size_t y_dim, size_t t_dim,
                      mt_err *err)
{
    const char *name = mt_loss_name(ls->kind);
    size_t outs = sh->rows * sh->c;

    switch (ls->kind) {
    case MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
        if (t_dim > 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss: %s needs class labels; the dataset has %zu float target%s per "
                              "example (use \"loss\": \"mse\")",
                              name, t_dim, plural(t_dim));
        if (y_dim != sh->rows)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss: the model outputs %zu row%s of %zu classes per example; the "
                              "dataset has %zu class label%s per example",
                              sh->rows, plural(sh->rows), sh->c, y_dim, plural(y_dim));
        return MT_OK;
    case MT_LOSS_BINARY_CROSSENTROPY:
        if ((t_dim > 0 ? t_dim : y_dim) != outs)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss: %s: the model outputs %zu value%s per example; the dataset "
                              "has %zu %s per example",
                              name, outs, plural(outs), t_dim > 0 ? t_dim : y_dim,
                              t_dim > 0 ? "float target(s)" : "class label(s)");
        return MT_OK;
    case MT_LOSS_MSE:
    case MT_LOSS_MAE:
        if (t_dim == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss: %s needs float targets (\"label_type\": \"float\"); the "
                              "dataset has class labels",
                              name);
        if (t_dim != outs)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "loss: %s: the model outputs %zu value%s per example; the dataset "
                              "has %zu target%s per example",
                              name, outs, plural(outs), t_dim, plural(t_dim));
        return MT_OK;
    }
    return mt_err_set(err, MT_INVALID_ARGUMENT, "loss: unknown loss");
}

float mt_loss_grad_scale(const mt_loss_spec *ls, const mt_loss_shape *sh, size_t global_examples)
{
    return 1.0f / (float)(global_examples * mt_loss_units(ls, sh));
}

/* ------------------------------------------------------------------ kernels */

/*
 * Softmax cross-entropy with label smoothing eps over m rows of c logits z (m, c), labels (m):
 * loss = lse(z) - Σ_j q_j z_j, q = (1-eps)·onehot + eps/c; d = (softmax(z) - q)·scale.
 */
static void xent_smooth(const float *z0, const int32_t *y, size_t m, size_t c, float eps,
                        float scale, bool ref, float *dout, double *sums)
{
    double loss = 0.0, correct = 0.0;
    for (size_t i = 0; i < m; i++) {
        const float *z = z0 + i * c;
        double mx = z[0], s = 0.0, zq = 0.0;
        size_t am = 0;
        for (size_t j = 1; j < c; j++)
            if (z[j] > mx) {
                mx = z[j];
                am = j;
            }
        for (size_t j = 0; j < c; j++) {
            double q = (double)eps / (double)c + (j == (size_t)y[i] ? 1.0 - (double)eps : 0.0);
            s += ref ? exp((double)z[j] - mx) : (double)expf(z[j] - (float)mx);
            zq += q * ((double)z[j] - mx);
        }
        loss += log(s) - zq;
        correct += am == (size_t)y[i];
        for (size_t j = 0; dout != NULL && j < c; j++) {
            double q = (double)eps / (double)c + (j == (size_t)y[i] ? 1.0 - (double)eps : 0.0);
            double p = exp((double)z[j] - mx) / s;
            dout[i * c + j] = (float)((p - q) * (double)scale);
        }
    }
    sums[MT_LOSS_SUM_LOSS] += loss;
    sums[MT_LOSS_SUM_CORRECT] += correct;
}

static int auc_bin(double p)
{
    int b = (int)(p * MT_LOSS_AUC_BINS);
    return b < 0 ? 0 : b >= MT_LOSS_AUC_BINS ? MT_LOSS_AUC_BINS - 1 : b;
}

/*
 * Element-wise losses over m outputs z against targets t: binary cross-entropy from logits,
 * squared or absolute error. Also the metric sums of the predictions p (sigmoid(z) for BCE).
 */
static void elementwise(mt_loss_kind k, const float *z, const float *t, size_t m, float eps,
                        float scale, float *dout, double *sums, double *hist)
{
    double loss = 0.0, bin = 0.0, ab = 0.0, sq = 0.0;
    for (size_t i = 0; i < m; i++) {
        double zi = z[i], ti = t[i], p = zi, g;
        if (k == MT_LOSS_BINARY_CROSSENTROPY) {
            double ts = ti * (1.0 - (double)eps) + 0.5 * (double)eps;
            p = 1.0 / (1.0 + exp(-zi));
            loss += (zi > 0 ? zi : 0.0) - zi * ts + log1p(exp(-fabs(zi)));
            g = p - ts;
            if (hist != NULL)
                hist[2 * auc_bin(p) + (ti > 0.5)] += 1.0;
        } else if (k == MT_LOSS_MSE) {
            loss += (zi - ti) * (zi - ti);
            g = 2.0 * (zi - ti);
        } else {
            loss += fabs(zi - ti);
            g = zi > ti ? 1.0 : zi < ti ? -1.0 : 0.0;
        }
        if (dout != NULL)
            dout[i] = (float)(g * (double)scale);
        bin += (p > 0.5) == (ti > 0.5);
        ab += fabs(p - ti);
        sq += (p - ti) * (p - ti);
    }
    sums[MT_LOSS_SUM_LOSS] += loss;
    sums[MT_LOSS_SUM_BINARY] += bin;
    sums[MT_LOSS_SUM_ABS] += ab;
    sums[MT_LOSS_SUM_SQ] += sq;
}

mt_code mt_loss_forward(const mt_loss_spec *ls, const mt_loss_shape *sh, const mt_loss_batch *b,
                        bool ref, float *dout, double *sums, double *hist, mt_err *err)
{
    size_t units = mt_loss_units(ls, sh), m = b->n * units;

    if (b->n == 0)
        return MT_OK;
    if (ls->kind == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
        double loss = 0.0;
        size_t correct = 0;
        mt_code rc;
        for (size_t i = 0; i < m; i++)
            if (b->labels[i] < 0 || (size_t)b->labels[i] >= sh->c)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "label %d of example %zu (row %zu) not in [0, %zu)",
                                  (int)b->labels[i], i / units, i % units, sh->c);
        if (ls->label_smoothing > 0.0f) {
            xent_smooth(b->out, b->labels, m, sh->c, ls->label_smoothing, b->grad_scale, ref, dout,
                        sums);
            return MT_OK;
        }
        rc = (ref ? mt_softmax_xent_ref : mt_softmax_xent)(dout, &loss, &correct, b->out, b->labels,
                                                           m, sh->c, b->grad_scale, err);
        if (rc != MT_OK)
            return rc;
        sums[MT_LOSS_SUM_LOSS] += loss;
        sums[MT_LOSS_SUM_CORRECT] += (double)correct;
        return MT_OK;
    }
    if (b->targets != NULL) {
        elementwise(ls->kind, b->out, b->targets, m, ls->label_smoothing, b->grad_scale, dout, sums,
                    hist);
        return MT_OK;
    }
    /* binary cross-entropy on 0/1 class labels: the labels as float targets, in chunks */
    for (size_t i = 0; i < m; i++)
        if (b->labels[i] != 0 && b->labels[i] != 1)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "label %d of example %zu is not 0 or 1 (binary_crossentropy)",
                              (int)b->labels[i], i / units);
    for (size_t i = 0; i < m; i += 256) {
        float t[256];
        size_t k = m - i < 256 ? m - i : 256;
        for (size_t j = 0; j < k; j++)
            t[j] = (float)b->labels[i + j];
        elementwise(ls->kind, b->out + i, t, k, ls->label_smoothing, b->grad_scale,
                    dout != NULL ? dout + i : NULL, sums, hist);
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ metrics */

double mt_loss_auc(const double *hist)
{
    double P = 0.0, N = 0.0, tp = 0.0, fp = 0.0, area = 0.0;
    for (int b = 0; b < MT_LOSS_AUC_BINS; b++) {
        N += hist[2 * b];
        P += hist[2 * b + 1];
    }
    if (P == 0.0 || N == 0.0)
        return 0.5;
    /* thresholds from the highest bin down: each bin moves (fp, tp) by its counts; trapezoid */
    for (int b = MT_LOSS_AUC_BINS - 1; b >= 0; b--) {
        double ntp = tp + hist[2 * b + 1], nfp = fp + hist[2 * b];
        area += (nfp - fp) * (tp + ntp) / 2.0;
        tp = ntp;
        fp = nfp;
    }
    return area / (P * N);
}

void mt_loss_metrics(const mt_loss_spec *ls, const mt_loss_shape *sh, const double *sums,
                     const double *hist, double examples, mt_metrics *out)
{
    double units = (double)mt_loss_units(ls, sh), outs = examples * (double)(sh->rows * sh->c);
    double labels = examples * (double)sh->rows;

    memset(out, 0, sizeof(*out));
    if (examples <= 0.0)
        return;
    out->loss = sums[MT_LOSS_SUM_LOSS] / (examples * units);
    for (int m = 0; m < MT_METRIC_COUNT; m++) {
        double v;
        if (!(ls->metrics & (1u << m)))
            continue;
        switch ((mt_metric_kind)m) {
        case MT_METRIC_ACCURACY:
        case MT_METRIC_TOKEN_ACCURACY:
            v = sums[MT_LOSS_SUM_CORRECT] / labels;
            break;
        case MT_METRIC_PERPLEXITY:
            v = exp(out->loss);
            break;
        case MT_METRIC_BINARY_ACCURACY:
            v = sums[MT_LOSS_SUM_BINARY] / outs;
            break;
        case MT_METRIC_MAE:
            v = sums[MT_LOSS_SUM_ABS] / outs;
            break;
        case MT_METRIC_MSE:
            v = sums[MT_LOSS_SUM_SQ] / outs;
            break;
        case MT_METRIC_AUC:
            if (hist == NULL)
                continue;
            v = mt_loss_auc(hist);
            break;
        default:
            continue;
        }
        out->value[m] = v;
        out->mask |= 1u << m;
    }
}

size_t mt_metrics_format(const mt_metrics *m, const char *prefix, char *buf, size_t cap)
{
    size_t at = 0;
    int k;

    if (cap == 0)
        return 0;
    buf[0] = '\0';
    k = snprintf(buf, cap, " - %sloss: %.4f", prefix, m->loss);
    at = k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
    for (int i = 0; i < MT_METRIC_COUNT && at < cap - 1; i++) {
        if (!(m->mask & (1u << i)))
            continue;
        k = snprintf(buf + at, cap - at, " - %s%s: %.4f", prefix, metric_names[i], m->value[i]);
        at = k < 0 ? at : at + (size_t)k < cap ? at + (size_t)k : cap - 1;
    }
    return at;
}

/* ------------------------------------------------------------------ validation */

static bool higher_is_better(const char *metric)
{
    return strcmp(metric, "accuracy") == 0 || strcmp(metric, "binary_accuracy") == 0 ||
           strcmp(metric, "token_accuracy") == 0 || strcmp(metric, "auc") == 0;
}

/* The metric a monitor name reads ("val_accuracy" -> "accuracy"), and whether it is reported. */
static bool monitor_known(const char *name, const mt_loss_spec *ls, bool val)
{
    const char *base = name;
    if (strncmp(name, "val_", 4) == 0) {
        if (!val)
            return false;
        base = name + 4;
    }
    if (strcmp(base, "loss") == 0)
        return true;
    for (int m = 0; m < MT_METRIC_COUNT; m++)
        if ((ls->metrics & (1u << m)) && strcmp(base, metric_names[m]) == 0)
            return m != MT_METRIC_AUC || base != name; /* auc: evaluations only */
    return false;
}

static mt_code parse_monitor(const cJSON *o, const char *path, const mt_loss_spec *ls, bool val,
                             bool with_delta, mt_monitor *mon, mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "monitor");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "mode");
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(o, "min_delta");
    const char *base;

    snprintf(mon->name, sizeof(mon->name), "%s", val ? "val_loss" : "loss");
    if (n != NULL) {
        if (!cJSON_IsString(n) || strlen(n->valuestring) >= sizeof(mon->name))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.monitor: must be a metric name", path);
        snprintf(mon->name, sizeof(mon->name), "%s", n->valuestring);
    }
    if (!monitor_known(mon->name, ls, val)) {
        char known[256];
        size_t at = (size_t)snprintf(known, sizeof(known), "loss");
        for (int m = 0; m < MT_METRIC_COUNT; m++)
            if ((ls->metrics & (1u << m)) && m != MT_METRIC_AUC && at < sizeof(known))
                at += (size_t)snprintf(known + at, sizeof(known) - at, ", %s", metric_names[m]);
        if (val && at < sizeof(known))
            at += (size_t)snprintf(known + at, sizeof(known) - at, ", val_loss");
        for (int m = 0; val && m < MT_METRIC_COUNT; m++)
            if ((ls->metrics & (1u << m)) && at < sizeof(known))
                at += (size_t)snprintf(known + at, sizeof(known) - at, ", val_%s", metric_names[m]);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.monitor: '%s' is not reported (%s)", path,
                          mon->name, known);
    }
    base = strncmp(mon->name, "val_", 4) == 0 ? mon->name + 4 : mon->name;
    mon->mode = higher_is_better(base) ? MT_MONITOR_MAX : MT_MONITOR_MIN;
    if (md != NULL) {
        if (!cJSON_IsString(md) ||
            (strcmp(md->valuestring, "auto") != 0 && strcmp(md->valuestring, "min") != 0 &&
             strcmp(md->valuestring, "max") != 0))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s.mode: must be \"auto\", \"min\" or \"max\"", path);
        if (strcmp(md->valuestring, "min") == 0)
            mon->mode = MT_MONITOR_MIN;
        else if (strcmp(md->valuestring, "max") == 0)
            mon->mode = MT_MONITOR_MAX;
    }
    mon->min_delta = 0.0;
    if (dl != NULL) {
        if (!with_delta || !cJSON_IsNumber(dl) || !(dl->valuedouble >= 0.0))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.min_delta: must be a number >= 0",
                              path);
        mon->min_delta = dl->valuedouble;
    }
    return MT_OK;
}

static mt_code check_fields(const cJSON *o, const char *path, const char *const *keys, mt_err *err)
{
    if (!cJSON_IsObject(o))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: must be an object", path);
    for (const cJSON *c = o->child; c != NULL; c = c->next) {
        bool ok = false;
        for (int k = 0; keys[k] != NULL; k++)
            ok = ok || strcmp(c->string, keys[k]) == 0;
        if (!ok)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.%s: unknown field", path, c->string);
    }
    return MT_OK;
}

mt_code mt_loss_validation_parse(const cJSON *node, const mt_loss_spec *ls, mt_validation_spec *out,
                                 mt_err *err)
{
    static const char *const keys[] = {"split",          "path", "every_steps",
                                       "early_stopping", "best", NULL};
    static const char *const stop_keys[] = {"monitor", "patience", "min_delta", "mode", NULL};
    static const char *const best_keys[] = {"monitor", "mode", NULL};
    const cJSON *split, *path, *every, *es, *best;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (node == NULL)
        return MT_OK;
    if ((rc = check_fields(node, "validation", keys, err)) != MT_OK)
        return rc;
    out->enabled = true;
    split = cJSON_GetObjectItemCaseSensitive(node, "split");
    path = cJSON_GetObjectItemCaseSensitive(node, "path");
    every = cJSON_GetObjectItemCaseSensitive(node, "every_steps");
    es = cJSON_GetObjectItemCaseSensitive(node, "early_stopping");
    best = cJSON_GetObjectItemCaseSensitive(node, "best");
    if ((split == NULL) == (path == NULL))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "validation: give \"split\" (a fraction of the training data) or "
                          "\"path\" (a file), %s",
                          split == NULL ? "neither is given" : "not both");
    if (split != NULL) {
        if (!cJSON_IsNumber(split) || !(split->valuedouble > 0.0) || split->valuedouble >= 1.0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "validation.split: must be a number in (0, 1)");
        out->split = split->valuedouble;
    } else {
        if (!cJSON_IsString(path) || path->valuestring[0] == '\0' ||
            strlen(path->valuestring) >= sizeof(out->path))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "validation.path: must be a file path");
        snprintf(out->path, sizeof(out->path), "%s", path->valuestring);
    }
    if (every != NULL) {
        if (!cJSON_IsNumber(every) || every->valuedouble < 1 || every->valuedouble > 1e12 ||
            every->valuedouble != floor(every->valuedouble))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "validation.every_steps: must be a positive integer");
        out->every_steps = (int64_t)every->valuedouble;
    }
    if (es != NULL) {
        const cJSON *pat;
        if ((rc = check_fields(es, "validation.early_stopping", stop_keys, err)) != MT_OK ||
            (rc = parse_monitor(es, "validation.early_stopping", ls, true, true, &out->stop,
                                err)) != MT_OK)
            return rc;
        pat = cJSON_GetObjectItemCaseSensitive(es, "patience");
        if (pat != NULL && (!cJSON_IsNumber(pat) || pat->valuedouble < 0 ||
                            pat->valuedouble > 1e9 || pat->valuedouble != floor(pat->valuedouble)))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "validation.early_stopping.patience: must be an integer >= 0");
        out->patience = pat != NULL ? (int64_t)pat->valuedouble : 0;
        out->early_stopping = true;
    }
    if (best != NULL) {
        if ((rc = check_fields(best, "validation.best", best_keys, err)) != MT_OK ||
            (rc = parse_monitor(best, "validation.best", ls, true, false, &out->best, err)) !=
                MT_OK)
            return rc;
        out->keep_best = true;
    }
    return MT_OK;
}

bool mt_loss_monitor_value(const mt_monitor *mon, const mt_metrics *train, const mt_metrics *val,
                           double *out)
{
    const mt_metrics *m = train;
    const char *base = mon->name;

    if (strncmp(base, "val_", 4) == 0) {
        m = val;
        base += 4;
    }
    if (m == NULL)
        return false;
    if (strcmp(base, "loss") == 0) {
        *out = m->loss;
        return true;
    }
    for (int k = 0; k < MT_METRIC_COUNT; k++)
        if ((m->mask & (1u << k)) && strcmp(base, metric_names[k]) == 0) {
            *out = m->value[k];
            return true;
        }
    return false;
}

bool mt_loss_monitor_improves(const mt_monitor *mon, double v, double best)
{
    if (isnan(v))
        return false;
    if (isnan(best))
        return true;
    return mon->mode == MT_MONITOR_MAX ? v - mon->min_delta > best : v + mon->min_delta < best;
}
