/* SPDX-License-Identifier: MIT */
/*
 * mt_loss.h — losses and metrics with Keras's names, and the spec sections that choose them
 * ("loss", "metrics", "validation").
 *
 * How it fits: core/model's spec parser calls mt_loss_spec_parse / mt_loss_validation_parse; both
 * engines (core/model's reference, core/spmd's mesh engine) call mt_loss_check when they are
 * built and mt_loss_forward on every batch; core/train and core/spmd's loops turn the summed
 * statistics into named metrics (mt_loss_metrics) for progress, and compare them for early
 * stopping and the best checkpoint (mt_loss_monitor_*). Calls core/tensor (the fused softmax
 * cross-entropy kernel, so the default loss keeps its bits).
 *
 * THE OUTPUT VIEW. A model's output per example has shape (d0, ..., dk); the loss reads it as
 * (rows, c): c = dk, rows = d0·...·dk-1 (1 for a vector). A language model's (T, V) logits have T
 * rows of V classes; a 1×1 conv2d's (H, W, K) output has H·W rows of K classes (per pixel).
 *   * sparse_categorical_crossentropy (default): one int32 class label per row ((n, rows) labels,
 *     core/data's y_dim == rows), softmax over each row's c logits; the loss of a batch is the
 *     MEAN over every label present in the global batch (Keras's and the rule: the mean
 *     over what is present). Optional label_smoothing ε: the target of a row is
 *     (1-ε)·onehot(y) + ε/c.
 *   * binary_crossentropy: from logits (no sigmoid layer needed), each of the rows·c outputs an
 *     independent binary target: float targets (t_dim == rows·c) or int32 labels 0/1 (y_dim ==
 *     rows·c); numerically stable form max(z,0) - z·t + log(1 + e^-|z|); label_smoothing ε
 *     replaces t by t·(1-ε) + ε/2 (Keras).
 *   * mse / mean_squared_error, mae / mean_absolute_error: float targets, t_dim == rows·c
 *     outputs; the loss is the mean over every output of the global batch (Keras: the mean over
 *     the last axis, then over the batch — the same for fixed t_dim).
 * "Units" are the labels (cross-entropy: rows) or outputs (others) of one example; every loss is
 * the sum over units divided by (global examples · units), so replicas' gradients summed equal
 * one device's.
 *
 * METRICS (Keras's names; mt_metric_name): accuracy (argmax of a row equals its label; needs
 * class labels), token_accuracy (the same, for per-token models), perplexity (exp of the mean
 * cross-entropy per label), binary_accuracy (prediction > 0.5 equals target > 0.5; prediction =
 * sigmoid(logit) for binary_crossentropy, the output itself otherwise), mae, mse (of the
 * prediction against the target, per output), auc (binary_crossentropy only: ROC AUC over the
 * whole evaluation set, from a histogram of MT_LOSS_AUC_BINS equal bins of the predicted
 * probability — Keras's AUC(num_thresholds=201) approximation: examples in one bin count as
 * ties, the trapezoid rule between bins; reported for evaluations only, never per step).
 * Names in reports: training "loss", "accuracy", ...; validation "val_" + name; the test split
 * "test_" + name (mt_metric_prefix).
 *
 * Threading: pure functions, any thread. Tests: tests/unit/test_loss.c (finite-difference
 * gradients of every loss, label smoothing, rows, AUC, spec errors).
 */
#ifndef MT_LOSS_H
#define MT_LOSS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

struct cJSON;

typedef enum mt_loss_kind {
    MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = 0, /* the default */
    MT_LOSS_BINARY_CROSSENTROPY = 1,
    MT_LOSS_MSE = 2,
    MT_LOSS_MAE = 3,
} mt_loss_kind;

typedef enum mt_metric_kind {
    MT_METRIC_ACCURACY = 0,
    MT_METRIC_BINARY_ACCURACY = 1,
    MT_METRIC_MAE = 2,
    MT_METRIC_MSE = 3,
    MT_METRIC_AUC = 4,
    MT_METRIC_PERPLEXITY = 5,
    MT_METRIC_TOKEN_ACCURACY = 6,
    MT_METRIC_COUNT
} mt_metric_kind;

/* The "loss" and "metrics" of a spec. */
typedef struct mt_loss_spec {
    mt_loss_kind kind;
    float label_smoothing; /* cross-entropies, in [0, 1); 0 = none */
    unsigned metrics;      /* bit (1u << mt_metric_kind) per metric reported */
} mt_loss_spec;

/* sparse categorical cross-entropy reporting accuracy: today's behaviour */
#define MT_LOSS_SPEC_DEFAULTS                                                                      \
    {                                                                                              \
        MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, 0.0f, 1u << MT_METRIC_ACCURACY                    \
    }

/* Which figures a reported name belongs to: training ("loss", "accuracy"), the validation set
 * ("val_loss", ...), the test split ("test_loss", ...). */
typedef enum mt_metric_group {
    MT_METRIC_GROUP_TRAIN = 0,
    MT_METRIC_GROUP_VAL = 1,
    MT_METRIC_GROUP_TEST = 2,
} mt_metric_group;

/* The reported name (static) of metric m (an mt_metric_kind, or -1 for the loss) in group g:
 * "loss", "val_accuracy", "test_auc"; "?" out of range. */
const char *mt_metric_report_name(mt_metric_group g, int m);

/* "sparse_categorical_crossentropy", ... (static); "?" out of range. */
const char *mt_loss_name(mt_loss_kind k);
/* "accuracy", "auc", ... (static); "?" out of range. */
const char *mt_metric_name(mt_metric_kind m);

/*
 * Parse the spec's "loss" (node, borrowed; NULL = the default) and "metrics" (NULL = the loss's
 * default: accuracy for sparse_categorical_crossentropy, none for the others, as Keras) into
 * *out. "loss" is a name or {"name": ..., "label_smoothing": x}; "metrics" a list of names.
 * INVALID_ARGUMENT naming the field: `loss: unknown loss 'hinge' (sparse_categorical_crossentropy,
 * binary_crossentropy, mse, mean_squared_error, mae, mean_absolute_error)`,
 * `loss.label_smoothing: must be a number in [0, 1)`, `metrics[1]: unknown metric 'f1' (...)`,
 * `metrics[0]: auc needs "loss": "binary_crossentropy"`.
 */
mt_code mt_loss_spec_parse(const struct cJSON *loss, const struct cJSON *metrics, mt_loss_spec *out,
                           mt_err *err);

/* The output view of a model (see THE OUTPUT VIEW). */
typedef struct mt_loss_shape {
    size_t rows; /* >= 1 */
    size_t c;    /* >= 1: classes (cross-entropy) or outputs per row */
} mt_loss_shape;

/* Units of one example: rows for sparse categorical cross-entropy, rows·c otherwise. */
size_t mt_loss_units(const mt_loss_spec *ls, const mt_loss_shape *sh);

/* Whether the loss reads float targets (mse, mae; binary_crossentropy when t_dim > 0). */
bool mt_loss_uses_targets(const mt_loss_spec *ls, size_t t_dim);

/*
 * Whether the loss fits the model's output view and the data's labels (y_dim class labels, or
 * t_dim float targets, per example). INVALID_ARGUMENT naming the field: `loss: mse needs float
 * targets ("label_type": "float"); the dataset has class labels`, `loss: the model outputs 4
 * rows of 10 classes per example; the dataset has 1 class label per example`, `loss: mse: the
 * model outputs 3 values per example; the dataset has 1 target per example`,
 * `loss: sparse_categorical_crossentropy needs class labels; the dataset has 1 float target per
 * example (use "loss": "mse")`. Pure.
 */
mt_code mt_loss_check(const mt_loss_spec *ls, const mt_loss_shape *sh, size_t y_dim, size_t t_dim,
                      mt_err *err);

/* Sums a batch adds (double; summed over replicas, divided by examples · units at the end). */
enum {
    MT_LOSS_SUM_LOSS = 0, /* Σ per-unit loss */
    MT_LOSS_SUM_CORRECT,  /* Σ rows whose argmax equals the label */
    MT_LOSS_SUM_BINARY,   /* Σ outputs whose thresholded prediction equals the target's */
    MT_LOSS_SUM_ABS,      /* Σ |prediction - target| */
    MT_LOSS_SUM_SQ,       /* Σ (prediction - target)² */
    MT_LOSS_NSUMS
};

#define MT_LOSS_AUC_BINS 200

/* One batch for mt_loss_forward (all borrowed for the call). */
typedef struct mt_loss_batch {
    const float *out;      /* (n, rows, c) model outputs (logits) */
    size_t n;              /* examples */
    const int32_t *labels; /* (n, y_dim) class labels, or NULL when the loss reads targets */
    const float *targets;  /* (n, t_dim) float targets, or NULL */
    float grad_scale;      /* d(loss)/d(out) is multiplied by it: mt_loss_grad_scale */
} mt_loss_batch;

/*
 * 1 / (global_examples · units) as the engines scale gradients: for the default loss with one
 * row this is exactly 1.0f / (float)global_examples, the bits of the engine before this module.
 */
float mt_loss_grad_scale(const mt_loss_spec *ls, const mt_loss_shape *sh, size_t global_examples);

/*
 * The loss of one batch: adds to sums[MT_LOSS_NSUMS] (caller's, accumulating) and, when hist
 * is not NULL (binary_crossentropy, evaluations), to the AUC histogram hist[2·MT_LOSS_AUC_BINS]
 * (bin b: negatives at 2b, positives at 2b+1); writes d(loss)/d(out)·grad_scale to dout
 * ((n, rows, c), may be NULL for evaluation). ref selects the plain reference kernels (double
 * accumulation) for the tests that check the engines. INVALID_ARGUMENT naming the example for a
 * class label outside [0, c) (or a binary label other than 0/1); nothing is added then.
 */
mt_code mt_loss_forward(const mt_loss_spec *ls, const mt_loss_shape *sh, const mt_loss_batch *b,
                        bool ref, float *dout, double *sums, double *hist, mt_err *err);

/* Named results: loss and every metric of ls->metrics. */
typedef struct mt_metrics {
    double loss;
    double value[MT_METRIC_COUNT];
    unsigned mask; /* bit per metric present in value */
} mt_metrics;

/*
 * Means from sums over `examples` examples (> 0): loss = sums[LOSS] / (examples · units), and
 * each metric of ls->metrics; auc only when hist is given (else left out of mask). Pure.
 */
void mt_loss_metrics(const mt_loss_spec *ls, const mt_loss_shape *sh, const double *sums,
                     const double *hist, double examples, mt_metrics *out);

/* ROC AUC from the histogram (0.5 when one class is absent). Pure. */
double mt_loss_auc(const double *hist);

/*
 * Append " - <prefix><name>: <value>" for the loss and each metric of m to buf (NUL-terminated
 * within cap), Keras's order: loss, then the metrics in mt_metric_kind order. prefix "" (training),
 * "val_", "test_". Returns the length written.
 */
size_t mt_metrics_format(const mt_metrics *m, const char *prefix, char *buf, size_t cap);

/* ------------------------------------------------------------------ validation and stopping */

typedef enum mt_monitor_mode {
    MT_MONITOR_AUTO = 0, /* max for accuracy-like metrics and auc, min otherwise */
    MT_MONITOR_MIN = 1,
    MT_MONITOR_MAX = 2,
} mt_monitor_mode;

/* A monitored quantity: "val_loss", "val_accuracy", "loss", ... */
typedef struct mt_monitor {
    char name[40];
    mt_monitor_mode mode; /* resolved: MIN or MAX after parsing */
    double min_delta;     /* an improvement is more than this (>= 0) */
} mt_monitor;

/* The spec's "validation" section. */
typedef struct mt_validation_spec {
    bool enabled;        /* the section is present */
    double split;        /* fraction of the training data held out, in (0, 1); 0 = none */
    char path[1024];     /* a validation file (same format as the dataset's train), or "" */
    int64_t every_steps; /* evaluate every N steps; 0 = at every epoch end (the default) */
    bool early_stopping; /* "early_stopping" present */
    mt_monitor stop;     /* its monitor (default val_loss) */
    int64_t patience;    /* evaluations without improvement before stopping (default 0) */
    bool keep_best;      /* "best" present: keep the best checkpoint by best.monitor */
    mt_monitor best;     /* default val_loss */
} mt_validation_spec;

/*
 * Parse "validation" (node, borrowed; NULL = none) into *out (zeroed first):
 * {"split": 0.1 | "path": "v.csv", "every_steps": N, "early_stopping": {"monitor": "val_loss",
 * "patience": 3, "min_delta": 0.001, "mode": "auto"|"min"|"max"}, "best": {"monitor": ...,
 * "mode": ...}}. ls (borrowed) decides which monitors exist (val_loss, val_<metric>, loss,
 * <metric>). INVALID_ARGUMENT naming the field (`validation.split: must be a number in (0, 1)`,
 * `validation.early_stopping.monitor: 'val_auc' is not reported (loss, accuracy, val_loss,
 * val_accuracy)`, `validation: give "split" or "path", not both`).
 */
mt_code mt_loss_validation_parse(const struct cJSON *node, const mt_loss_spec *ls,
                                 mt_validation_spec *out, mt_err *err);

/* The value of monitor mon in (train, val) results (val may be NULL); false when absent. */
bool mt_loss_monitor_value(const mt_monitor *mon, const mt_metrics *train, const mt_metrics *val,
                           double *out);

/* Whether v improves on best by more than min_delta in mon's direction (any v beats a NaN best). */
bool mt_loss_monitor_improves(const mt_monitor *mon, double v, double best);

#endif
