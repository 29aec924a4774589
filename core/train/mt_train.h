/* SPDX-License-Identifier: MIT */
/*
 * mt_train.h — the local (single-process, one device) training loop: epochs and/or a step cap,
 * a deterministic shuffle per epoch from (seed, epoch), per-step metrics (loss, accuracy,
 * examples/s, step time) and an evaluation pass over the test set at each epoch end.
 *
 * How it fits: `meshtrain train --local` (client/cmd_train.c) calls mt_train_run with a parsed
 * job spec and prints what the progress callback reports. Calls core/data (IDX) and core/model.
 * Threading: runs on the caller's thread; blocks until training ends; the callback runs on it.
 * Tests: tests/unit/test_train.c, tests/integration/test_fashion_accuracy.sh.
 */
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/mt_idx.h"
#include "loss/mt_loss.h"
#include "model/mt_model.h"
#include "status/mt_status.h"

/* Overrides of the spec (0 = keep the spec's value). */
typedef struct mt_train_options {
    int64_t epochs; /* --epochs */
    int64_t steps;  /* --steps: total step cap */
} mt_train_options;

#define MT_TRAIN_OPTIONS_DEFAULTS                                                                  \
    {                                                                                              \
        0, 0                                                                                       \
    }

typedef enum mt_train_event {
    MT_TRAIN_STEP,      /* after each step: running epoch metrics */
    MT_TRAIN_EPOCH_END, /* after an epoch (or the last partial one) and its evaluation */
} mt_train_event;

typedef struct mt_train_progress {
    mt_train_event event;
    int64_t epoch, epochs;           /* 1-based epoch, planned epochs */
    int64_t step;                    /* global steps done */
    int64_t epoch_step, epoch_steps; /* steps done in this epoch / planned in this epoch */
    double loss, accuracy;           /* running means over this epoch's examples */
    double epoch_seconds;            /* training time of this epoch so far */
    double step_ms;                  /* time of the last step */
    double examples_per_sec;         /* this epoch so far */
    double test_loss, test_accuracy; /* EPOCH_END only (test.loss and test's accuracy) */
    mt_metrics train;                /* running means of loss and the spec's metrics (core/loss):
                                        reported as "loss", "accuracy", "mae", ... */
    bool has_val;                    /* val holds the validation evaluation made after this step
                                        (STEP with "every_steps") or in this epoch (EPOCH_END) */
    mt_metrics val;                  /* reported as "val_loss", "val_accuracy", ... */
    bool has_test;                   /* EPOCH_END with a test split */
    mt_metrics test;                 /* reported as "test_loss", "test_accuracy", ... */
    bool stopping;                   /* early stopping ends the run after this event */
    double batch_loss;               /* STEP: the last step's own loss (mean over its batch) */
} mt_train_progress;

/* Progress callback; a non-OK return stops training with that code (CANCELLED, say). */
typedef mt_code (*mt_train_progress_fn)(void *ctx, const mt_train_progress *p);

typedef struct mt_train_result {
    int64_t steps, epochs;
    double test_loss, test_accuracy;
    double examples_per_sec; /* training examples / training seconds (eval excluded) */
    bool has_val, has_test;  /* the last validation / test results below are filled */
    mt_metrics val, test;    /* the last evaluation of each split */
    bool stopped_early;      /* early stopping ended the run at `steps` */
    int64_t best_step;       /* "validation.best": the step of the best checkpoint; 0 = none */
    double best_value;       /* its monitored value */
} mt_train_result;

/*
 * Train spec's model on in-memory data: train and test are borrowed (see mt_idx_set_load).
 * progress may be NULL. Codes: INVALID_ARGUMENT (spec does not fit the data: shapes, classes),
 * RESOURCE_EXHAUSTED, or the callback's code.
 */
mt_code mt_train_run_data(const mt_job_spec *spec, const mt_train_options *opt,
                          const mt_idx_set *train, const mt_idx_set *test,
                          mt_train_progress_fn progress, void *ctx, mt_train_result *res,
                          mt_err *err);

/*
 * What runs a step: the one-device model (mt_train_run_data) or the SPMD trainer (core/spmd).
 * The loop calls step on each global batch (n examples, borrowed), evaluate on the test set at
 * each epoch end, and after_step (may be NULL) after each step with the position a checkpoint
 * must record (the next step's epoch and the examples of that epoch consumed) and whether it was
 * the last step of the run. A non-OK return stops training with that code.
 */
typedef struct mt_train_backend {
    void *ctx;
    /* labels (n, y_dim) or NULL, targets (n, t_dim) or NULL, as the set carries them */
    mt_code (*step)(void *ctx, const float *x, const int32_t *labels, const float *targets,
                    size_t n, uint64_t step, uint64_t first_example, mt_step_metrics *metrics,
                    mt_err *err);
    /* adds the loss and metric sums (core/loss) and the AUC histogram (hist may be NULL) */
    mt_code (*evaluate)(void *ctx, const float *x, const int32_t *labels, const float *targets,
                        size_t n, double *sums, double *hist, mt_err *err);
    /* best: the validation just made is the best so far by "validation.best" (keep this step's
       checkpoint as the best one) */
    mt_code (*after_step)(void *ctx, int64_t step, int64_t epoch, size_t input_position, bool last,
                          bool best, mt_err *err);
    mt_loss_shape out; /* the model output's (rows, c) view (for the metrics) */
    /* may be NULL: the validation bookkeeping (best value and step, early stopping's patience)
       as mt_train_val_text, after the start (a resumed run's restored one) and after every
       evaluation, before after_step: what a checkpoint must carry so that a resumed run keeps
       its best checkpoint and its patience (borrowed until the next call) */
    void (*val_state)(void *ctx, const char *text);
} mt_train_backend;

/* Where a resumed run starts: steps done, 0-based epoch, examples of that epoch consumed, and
 * the validation bookkeeping of the run it continues (mt_train_val_text; NULL or "": none). */
typedef struct mt_train_start {
    int64_t step, epoch;
    size_t input_position;
    const char *val; /* borrowed */
} mt_train_start;

/*
 * The loop behind mt_train_run_data over any backend: epochs and/or the step cap of spec and opt,
 * a permutation per epoch from (seed, epoch), batches of spec->batch_size (the last one short),
 * progress events. train/val/test borrowed (flat examples of train->h*w*c floats; val and test
 * may be NULL); start may be NULL (from the beginning). With val and the spec's "validation":
 * an evaluation of val every validation.every_steps steps (else after each epoch's last step),
 * early stopping (the run ends after the step whose evaluation exhausted the patience: that step
 * is `last` for after_step) and the best step (after_step's `best`). The test split is evaluated
 * at every epoch end. Codes: INVALID_ARGUMENT (empty training set), RESOURCE_EXHAUSTED, the
 * backend's and the callback's codes.
 */
mt_code mt_train_loop(const mt_job_spec *spec, const mt_train_options *opt, const mt_idx_set *train,
                      const mt_idx_set *val, const mt_idx_set *test, const mt_train_backend *be,
                      const mt_train_start *start, mt_train_progress_fn progress, void *ctx,
                      mt_train_result *res, mt_err *err);

/*
 * Keras's validation_split: the LAST ceil(split · n) examples of `all` (file order, before any
 * shuffling; so the same on every mesh) become *val, the rest *train. Both are views borrowing
 * all's buffers (never mt_idx_set_fini them). INVALID_ARGUMENT when either part would be empty.
 */
mt_code mt_train_split_validation(const mt_idx_set *all, double split, mt_idx_set *train,
                                  mt_idx_set *val, mt_err *err);

/*
 * The bounds of a run, as mt_train_loop computes them for any input: from spec/opt epochs and
 * steps, the resume position (start may be NULL) and per_epoch steps per epoch (>= 1), the
 * number of epochs and the total step cap. Pure.
 */
void mt_train_run_bounds(const mt_job_spec *spec, const mt_train_options *opt,
                         const mt_train_start *start, int64_t per_epoch, int64_t *epochs,
                         int64_t *cap);

/* Running totals of an epoch behind the MT_TRAIN_STEP progress fields. */
typedef struct mt_train_epoch_acc {
    double loss_sum, correct, seconds;
    size_t seen;
    double sums[MT_LOSS_NSUMS]; /* the steps' global loss and metric sums (core/loss) */
    const mt_loss_spec *ls;     /* borrowed: the spec's loss and metrics */
    mt_loss_shape out;          /* the model output's view */
} mt_train_epoch_acc;

/* A zeroed accumulator for the spec's loss (ls, borrowed) and the output view. */
void mt_train_epoch_acc_init(mt_train_epoch_acc *acc, const mt_loss_spec *ls,
                             const mt_loss_shape *out);

/*
 * The validation schedule and stopping state of a run (spec "validation"); both loops use it.
 * Pure bookkeeping.
 */
typedef struct mt_train_val_state {
    const mt_validation_spec *v; /* borrowed */
    double stop_best, best_best; /* the best monitored values so far (NaN: none yet) */
    int64_t wait;                /* evaluations without improvement of the stop monitor */
    int64_t best_step;           /* the step whose evaluation gave best_best (0: none) */
} mt_train_val_state;

void mt_train_val_init(mt_train_val_state *vs, const mt_validation_spec *v);

/* Room for mt_train_val_text (two monitor names and four numbers as JSON). */
#define MT_TRAIN_VAL_TEXT 320

/*
 * The bookkeeping of vs as a JSON object into buf (cap >= MT_TRAIN_VAL_TEXT), "" when the spec
 * has neither a best checkpoint nor early stopping: {"best_monitor": "val_mae", "best_mode":
 * "min", "best": 46.3 | null, "best_step": 1500, "stop_monitor": ..., "stop_mode": ...,
 * "stop_best": ..., "wait": 2}. Checkpoints carry it ("meta/meshtrain.validation", core/spmd).
 */
void mt_train_val_text(const mt_train_val_state *vs, char *buf, size_t cap);

/*
 * Continue the bookkeeping saved by mt_train_val_text (text borrowed): the best value and step
 * when the spec keeps a best checkpoint by the same monitor and mode, the stop monitor's best
 * and the patience count when it stops early on the same monitor and mode; a part of another
 * monitor (a run started from another job's checkpoint) is left as mt_train_val_init set it.
 * Returns false (vs unchanged) when text is not such an object.
 */
bool mt_train_val_restore(mt_train_val_state *vs, const char *text);

/* Whether a validation evaluation follows step `step` (global, done) that ended the epoch when
 * epoch_end. */
bool mt_train_val_due(const mt_train_val_state *vs, int64_t step, bool epoch_end);

/*
 * Account an evaluation (train: this epoch's running results, val: the evaluation): *best when
 * it is the best so far by validation.best, *stop when early stopping's patience is exhausted.
 */
void mt_train_val_update(mt_train_val_state *vs, const mt_metrics *train, const mt_metrics *val,
                         bool *best, bool *stop);

/*
 * Account a step of n examples that took dt seconds with metrics m (means over the n): updates
 * acc and p's running fields (step = steps done after it, epoch_step, loss, accuracy,
 * batch_loss, epoch_seconds, step_ms, examples_per_sec). Pure.
 */
void mt_train_progress_add(mt_train_progress *p, mt_train_epoch_acc *acc, int64_t step,
                           int64_t epoch_step, size_t n, const mt_step_metrics *m, double dt);

/* Load the spec's dataset (IDX files) and mt_train_run_data. Adds the data loader's codes. */
mt_code mt_train_run(const mt_job_spec *spec, const mt_train_options *opt,
                     mt_train_progress_fn progress, void *ctx, mt_train_result *res, mt_err *err);

#endif
