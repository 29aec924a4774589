/* SPDX-License-Identifier: MIT */
/*
 * mt_model.h — the job spec (JSON) and the single-device REFERENCE engine: a model of
 * core/layers modules planned on one device, its named parameters, loss, optimizers and the
 * training/eval step on one device's local batch.
 *
 * How it fits: `meshtrain predict`, core/train and the tests build a model (mt_model_new) and
 * call mt_model_train_step per batch; the mesh engine (core/spmd) runs the same layer modules
 * over devices and is tested against this one (tests/unit/test_layers.c, test_spmd.c). Every
 * parameter has a stable name and a GLOBAL shape, its values are created shard by shard from the
 * seed (mt_model_param_init), and every quantity that must be summed across replicas — loss sum
 * and correct count, batch-norm statistics and gradient sums, parameter gradients — passes
 * through the mt_model_comm hook, which is a no-op on one device.
 * Loss: the spec's loss (core/loss: sparse categorical cross-entropy by default, binary
 * cross-entropy, mse, mae) over the output's (rows, c) view: the SUM over every label or output of
 * the local batch divided by the GLOBAL count (examples · units), so replica gradients summed
 * equal the single-device gradient.
 * Invariants: a layer's inputs are earlier layers or the model input (a graph in list order);
 * NHWC images; parameters are row-major in Keras' layouts (dense kernel (in, out), conv kernel
 * (KH, KW, C, F)).
 * Threading: a model is used by one thread at a time; distinct models share nothing.
 * Tests: tests/unit/test_model.c (spec validation, finite-difference gradients per layer and for a
 * whole model), tests/unit/test_layers.c, tests/integration/test_fashion_accuracy.sh.
 */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loss/mt_loss.h"
#include "status/mt_status.h"

struct cJSON;

/* ------------------------------------------------------------------ job spec */

#define MT_SPEC_PATH_MAX  1024
#define MT_LAYER_NAME_MAX 32

typedef enum mt_layer_kind {
    MT_LAYER_DENSE,
    MT_LAYER_CONV2D,
    MT_LAYER_MAX_POOL2D,
    MT_LAYER_FLATTEN,
    MT_LAYER_BATCH_NORM,
    MT_LAYER_DROPOUT,
    MT_LAYER_ADD,         /* element-wise sum of 2+ inputs of one shape (residual connections) */
    MT_LAYER_CONCATENATE, /* 2+ inputs joined along their last axis */
    MT_LAYER_ACTIVATION,  /* an activation function as a layer */
    MT_LAYER_GLOBAL_AVERAGE_POOLING2D, /* (H, W, C) -> (C): each channel's mean */
    MT_LAYER_LAYER_NORM,               /* normalisation of each row over its features */
    MT_LAYER_AVERAGE_POOLING2D,        /* the mean of each window */
    MT_LAYER_EMBEDDING,                /* token ids (T) -> (T, output_dim) rows of a table */
    MT_LAYER_POSITION_EMBEDDING,       /* (T, C) + a learned vector per position */
    MT_LAYER_ATTENTION,                /* multi-head (causal) attention over fused q, k, v */
    MT_LAYER_KIND_COUNT                /* a new kind goes above, with its module in core/layers */
} mt_layer_kind;

#define MT_LAYER_MAX_INPUTS 8
#define MT_LAYER_INPUT      (-1) /* inputs[k]: the model's input rather than a layer */

typedef enum mt_activation {
    MT_ACT_LINEAR,
    MT_ACT_RELU,
    MT_ACT_SOFTMAX, /* only on the last layer; fused into the loss (logits feed the loss) */
    MT_ACT_GELU,    /* exact (erf) form */
    MT_ACT_TANH,
    MT_ACT_SIGMOID,
    MT_ACT_LEAKY_RELU, /* slope 0.2 below zero (Keras' leaky_relu activation) */
} mt_activation;

#define MT_LEAKY_RELU_SLOPE 0.2f

typedef struct mt_layer_spec {
    mt_layer_kind kind;
    char name[MT_LAYER_NAME_MAX];      /* "dense_1", "conv2d_2" ...: per type, 1-based, as Keras */
    mt_activation activation;          /* dense, conv2d */
    size_t units;                      /* dense; embedding: output_dim */
    size_t input_dim;                  /* embedding: the vocabulary size */
    size_t heads;                      /* attention: num_heads */
    bool causal;                       /* attention: each position sees itself and earlier ones */
    size_t filters, kh, kw;            /* conv2d; kh, kw: also the pooling window */
    bool same;                         /* conv2d padding "same" (else "valid") */
    size_t sh, sw;                     /* conv2d strides (default 1), pooling strides */
    bool use_bias;                     /* dense, conv2d (default true) */
    bool tied;                         /* dense: "tied_to" is set */
    int tied_to;                       /* dense: the earlier embedding layer whose table is the
                                          kernel, transposed (a tied LM head) */
    char tied_name[MT_LAYER_NAME_MAX]; /* dense: "tied_to" as written (resolved after parsing) */
    float rate;                        /* dropout, in [0, 1) */
    bool center, scale;                /* batch_norm beta / gamma (default true) */
    float momentum, epsilon;           /* batch_norm (Keras defaults 0.99, 0.001) */
    int n_inputs;                      /* 1, or 2..MT_LAYER_MAX_INPUTS for add / concatenate */
    int inputs[MT_LAYER_MAX_INPUTS];   /* producing layers, all earlier (a graph in topological
                                          order), or MT_LAYER_INPUT; default: the previous layer */
} mt_layer_spec;

typedef enum mt_optimizer_kind {
    MT_OPT_SGD,
    MT_OPT_ADAM,
    MT_OPT_ADAMW,
    MT_OPT_RMSPROP,
    MT_OPT_ADAGRAD,
} mt_optimizer_kind;

typedef enum mt_schedule_kind {
    MT_SCHED_CONSTANT,
    MT_SCHED_STEP,        /* lr · decay_rate ^ floor(step / decay_steps) */
    MT_SCHED_EXPONENTIAL, /* lr · decay_rate ^ (step / decay_steps), floored when staircase */
    MT_SCHED_COSINE,      /* lr · ((1 - alpha) · ½(1 + cos(π · min(step, decay_steps) /
                             decay_steps)) + alpha), as Keras' CosineDecay */
} mt_schedule_kind;

/* "optimizer.schedule": the learning rate by update; step counts updates after the warmup. */
typedef struct mt_lr_schedule {
    mt_schedule_kind kind;
    int64_t warmup_steps; /* linear from lr / warmup_steps to lr over the first updates; 0 none */
    int64_t decay_steps;  /* step, exponential, cosine */
    float decay_rate;     /* step, exponential */
    float alpha;          /* cosine: the final fraction of lr (default 0) */
    bool staircase;       /* exponential */
} mt_lr_schedule;

typedef struct mt_optimizer_spec {
    mt_optimizer_kind kind;
    float learning_rate;         /* default 0.01 for sgd, 0.001 for the others (Keras) */
    float momentum;              /* sgd, default 0 */
    bool nesterov;               /* sgd with momentum */
    float beta1, beta2, epsilon; /* adam, adamw: Keras defaults 0.9, 0.999, 1e-7 */
    float weight_decay;          /* sgd (0) and adamw (0.004), decoupled as Keras */
    float rho;                   /* rmsprop, default 0.9 */
    float initial_accumulator;   /* adagrad, default 0.1 */
    float global_clipnorm;       /* clip the gradients' global norm to this; 0: no clipping */
    mt_lr_schedule schedule;
} mt_optimizer_spec;

/* The dataset section. The data module (core/data) may replace the parser and extend this. */
typedef struct mt_dataset_spec {
    char format[16]; /* "idx"; "text" / "synthetic": read by core/spmd from the JSON */
    char train_images[MT_SPEC_PATH_MAX], train_labels[MT_SPEC_PATH_MAX];
    char test_images[MT_SPEC_PATH_MAX], test_labels[MT_SPEC_PATH_MAX];
} mt_dataset_spec;

/* "reproducibility" (docs/reproducibility.md): which meshes give the same bits. */
typedef enum mt_reproducibility {
    MT_REPRO_FIXED_MESH = 0, /* "fixed_mesh" (default): the same bits on the same mesh */
    MT_REPRO_MESH_INVARIANT, /* "mesh_invariant": the same bits on every mesh that keeps them */
} mt_reproducibility;

typedef struct mt_job_spec {
    char name[128];    /* "name", default "" */
    uint64_t seed;     /* default 42 */
    size_t batch_size; /* GLOBAL batch, default 32 */
    int64_t epochs;    /* default 1 when neither epochs nor steps is given; 0 = not set */
    int64_t steps;     /* total step cap; 0 = not set (run the epochs) */
    mt_optimizer_spec optimizer;
    int input_rank;        /* 0 when model.input_shape is absent (the dataset decides) */
    size_t input_shape[3]; /* per example, e.g. (28, 28, 1) */
    int n_layers;
    mt_layer_spec *layers; /* owned array of n_layers */
    mt_dataset_spec dataset;
    int64_t digest_every; /* "digest_every": a state digest every N steps (besides every epoch
                             end and checkpoint); 0 = not set (docs/reproducibility.md) */
    mt_reproducibility reproducibility; /* "reproducibility", default "fixed_mesh" */
    bool fsdp_reshard_after_forward;    /* "fsdp.reshard_after_forward" (default true): weights
                                           sharded over the batch dim are gathered per layer and
                                           freed after use; false keeps the gathered copies */
    mt_loss_spec loss;                  /* "loss" and "metrics" (core/loss) */
    mt_validation_spec validation;      /* "validation" (core/loss): held-out data, early stopping,
                                           the best checkpoint */
} mt_job_spec;

/* How many inputs of later layers read layer i's output (the last layer's feeds the loss). */
int mt_job_spec_consumers(const mt_job_spec *spec, int i);

/* Whether layer i's output gradient is summed over readers in an accumulator (several readers,
 * or a join reads it) rather than taken by pointer from its one reader. Both engines use it. */
bool mt_job_spec_output_shared(const mt_job_spec *spec, int i);

/*
 * Output shape of a join layer (add, concatenate) of layer idx from its inputs' shapes
 * (ranks[k], shapes[k]); both engines use it. INVALID_ARGUMENT naming the layer and the shapes:
 * "model.layers[4] (add_1): input shapes (64) and (32) differ".
 */
mt_code mt_layer_join_shape(const mt_layer_spec *l, int idx, const int *ranks,
                            const size_t (*shapes)[3], int *out_rank, size_t *out_shape,
                            mt_err *err);

/*
 * Parse and validate a job spec (JSON text, len bytes, borrowed). On MT_OK *out is owned (free
 * with mt_job_spec_free). An invalid spec gives INVALID_ARGUMENT and err->msg
 * "<json path>: <why>" (e.g. "model.layers[2].units: must be a positive integer"); keys "mesh",
 * "layouts", "input_layout", "checkpoint", "restart", "elastic" and "name" are accepted for other
 * modules, other unknown keys are refused. RESOURCE_EXHAUSTED when out of memory.
 */
mt_code mt_job_spec_parse(const char *json, size_t len, mt_job_spec **out, mt_err *err);

/* mt_job_spec_parse from a parsed JSON root (borrowed). */
mt_code mt_job_spec_from_json(const struct cJSON *root, mt_job_spec **out, mt_err *err);

/* Read a job spec file of at most max bytes into *out (returns owned, NUL-terminated; mt_free)
 * and *len. NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT ("open PATH: why", too big, read
 * error), RESOURCE_EXHAUSTED. */
mt_code mt_job_spec_read(const char *path, size_t max, char **out, size_t *len, mt_err *err);

/* Read the file at path and mt_job_spec_parse it. NOT_FOUND / INVALID_ARGUMENT naming the file. */
mt_code mt_job_spec_load(const char *path, mt_job_spec **out, mt_err *err);

/* Free a spec; NULL is a no-op. */
void mt_job_spec_free(mt_job_spec *spec);

/*
 * Parse the "dataset" object (node may be NULL: defaults to the Fashion-MNIST IDX files under
 * /usr/share/datasets/fashion-mnist). Kept apart so the data module can replace it.
 * INVALID_ARGUMENT with "dataset.<field>: <why>".
 */
mt_code mt_job_spec_parse_dataset(const struct cJSON *node, mt_dataset_spec *out, mt_err *err);

/* ------------------------------------------------------------------ model */

/* Tags passed to mt_model_comm.allreduce_sum: what is being reduced. */
enum {
    MT_MODEL_COMM_METRICS = 1,  /* loss sum and correct count, over the batch replicas */
    MT_MODEL_COMM_BN_STATS = 2, /* batch-norm sums (forward and backward), over batch replicas */
    MT_MODEL_COMM_GRAD_BASE = 1000, /* + parameter index: that parameter's gradient */
};

/* Reduction hook. allreduce_sum sums buf (n floats) in place over the replicas of `group_tag`. */
typedef struct mt_model_comm {
    void *ctx;
    mt_code (*allreduce_sum)(void *ctx, float *buf, size_t n, int group_tag);
} mt_model_comm;

typedef enum mt_param_init {
    MT_INIT_ZEROS,
    MT_INIT_ONES,
    MT_INIT_GLOROT_UNIFORM,
    MT_INIT_UNIFORM_005, /* uniform in [-0.05, 0.05): Keras' Embedding default */
} mt_param_init;

/* A named parameter (or non-trainable state such as a moving mean). Borrowed from the model. */
typedef struct mt_model_param {
    char name[48]; /* "dense_1.kernel" */
    int rank;
    size_t shape[4];       /* global shape */
    size_t offsets[4];     /* this device's shard start (0 on one device) */
    size_t local_shape[4]; /* this device's shard (== shape on one device) */
    size_t size;           /* elements of the local shard */
    mt_param_init init;
    bool trainable;       /* false for moving mean/variance */
    float *value;         /* local shard values */
    float *grad;          /* local gradient (trainable only, else NULL) */
    float *slot1, *slot2; /* optimizer state (Adam m, v; SGD velocity in slot1) */
} mt_model_param;

typedef struct mt_model mt_model;

/*
 * Fill out (local_shape elements) with the shard [offsets, offsets+local_shape) of the parameter's
 * initial value: Glorot-uniform kernels keyed by (seed, name), zero biases/betas/moving means,
 * one gammas/moving variances. Bit-identical to the slice of the full tensor.
 */
mt_code mt_model_param_init(const mt_model_param *p, uint64_t seed, const size_t *offsets,
                            const size_t *local_shape, float *out, mt_err *err);

/*
 * Build the model of `spec` for per-example input shape in_shape (rank in_rank, 1..3; the spec's
 * model.input_shape when it has one must equal it) and local batches of at most max_batch
 * examples; parameters are created and initialised from spec->seed. `spec` is borrowed for the
 * call only. The last layer's output of any shape is read by the loss as (rows, c)
 * (mt_model_output_view); whether it fits the data is mt_model_check_data's. Codes:
 * INVALID_ARGUMENT ("model.layers[i]...: why", e.g. a kernel larger than its input),
 * RESOURCE_EXHAUSTED (out of memory, or beyond MT_MODEL_LIMITS_DEFAULTS: see
 * mt_model_check_limits).
 */
mt_code mt_model_new(const mt_job_spec *spec, int in_rank, const size_t *in_shape, size_t max_batch,
                     mt_model **out, mt_err *err);

/* Free the model; NULL is a no-op. */
void mt_model_free(mt_model *m);

/* Resource limits of a model (RESOURCE_EXHAUSTED beyond them). */
typedef struct mt_model_limits {
    uint64_t max_params;     /* parameters incl. batch-norm state; Adam holds 4 floats each */
    uint64_t max_batch;      /* examples per (global or local) batch */
    uint64_t max_activation; /* floats in one layer's output per example */
} mt_model_limits;

/* 100M parameters (1.6 GB with Adam), 65536 examples, 16M floats per example and layer. */
#define MT_MODEL_LIMITS_DEFAULTS                                                                   \
    {                                                                                              \
        100000000u, 65536u, 16777216u                                                              \
    }

/* What a spec builds to, without allocating it. Counts saturate at UINT64_MAX. */
typedef struct mt_model_size {
    uint64_t params;            /* every parameter, trainable or not */
    uint64_t widest_activation; /* the largest per-example layer output (or input), in floats */
} mt_model_size;

/*
 * Shape inference of mt_model_new without allocating: the size of spec's model for per-example
 * input in_shape (rank 1..3). Codes: INVALID_ARGUMENT as mt_model_new (layers that do not fit
 * their input). Pure; any thread.
 */
mt_code mt_model_spec_size(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                           mt_model_size *out, mt_err *err);

/*
 * Every layer's per-example output shape (ranks[i], shapes[i] for i < spec->n_layers) for model
 * input in_shape (rank 1..3): the layer modules' shape inference, without allocating.
 * INVALID_ARGUMENT as mt_model_new; RESOURCE_EXHAUSTED. Pure; any thread.
 */
mt_code mt_model_spec_shapes(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                             int *ranks, size_t (*shapes)[3], mt_err *err);

/*
 * The activation an engine applies after layer i of spec (0 <= i < spec->n_layers): the layer's
 * own, except that a relu on a conv2d directly followed by a max_pool2d without activation moves to
 * the pool (the conv2d gets linear, the pool relu). Max and relu commute exactly (relu is
 * monotone), so outputs, argmax choices where the gradient is non-zero, and gradients are the same
 * bits, while the relu and its mask touch a quarter of the elements. Both engines (core/model,
 * core/spmd) use it so they stay identical. Pure; any thread.
 */
mt_activation mt_model_layer_activation(const mt_job_spec *spec, int i);

/*
 * The spec validator's size check: batch > lim->max_batch, more parameters than
 * lim->max_params or a wider layer output than lim->max_activation -> RESOURCE_EXHAUSTED with
 * the figure and the limit ("model: 250000000 parameters exceed the limit of 100000000");
 * INVALID_ARGUMENT as mt_model_spec_size. mt_model_new applies MT_MODEL_LIMITS_DEFAULTS itself
 * (with its max_batch) before allocating. Pure; any thread.
 */
mt_code mt_model_check_limits(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                              size_t batch, const mt_model_limits *lim, mt_err *err);

/*
 * Run the plain reference kernels (core/tensor/mt_kernels_ref.c: double accumulation, no BLAS)
 * instead of the fast ones, in every layer and the loss: slow; for tests that check the fast
 * paths and the SPMD engine against the obvious math. Off by default.
 */
void mt_model_use_reference_kernels(mt_model *m, bool on);

/* Number of parameters (including non-trainable state) and the i-th one (borrowed). */
size_t mt_model_param_count(const mt_model *m);
mt_model_param *mt_model_param_at(mt_model *m, size_t i);
/* The parameter with this name, or NULL. */
mt_model_param *mt_model_param_find(mt_model *m, const char *name);
/* Number of classes (width of the last layer's last axis: c of the output view). */
size_t mt_model_num_classes(const mt_model *m);

/* The (rows, c) view of a per-example output of shape[rank] (core/loss: c = the last axis, rows
 * = the product of the others). Both engines use it. Pure. */
void mt_model_output_view(int rank, const size_t *shape, mt_loss_shape *out);

/* The model's output view. */
mt_loss_shape mt_model_output_shape(const mt_model *m);

/*
 * Whether the spec's loss fits this model's output and data with y_dim class labels or t_dim
 * float targets per example (mt_loss_check). INVALID_ARGUMENT naming "loss". Pure.
 */
mt_code mt_model_check_data(const mt_model *m, size_t y_dim, size_t t_dim, mt_err *err);
/* Per-example input size in floats. */
size_t mt_model_input_size(const mt_model *m);
/* Optimizer steps applied so far (Adam's t). Settable for checkpoint restore. */
int64_t mt_model_iterations(const mt_model *m);
void mt_model_set_iterations(mt_model *m, int64_t t);

/*
 * Forward pass over a local batch x (local_batch * input_size floats, borrowed; local_batch <=
 * max_batch). training selects batch statistics and dropout; step and first_example (the GLOBAL
 * index of x's first example) key the dropout masks; global_batch is the batch-norm row count
 * across replicas. comm may be NULL (one device). Returns a borrowed pointer to the logits
 * (local_batch, rows, c) (the output view) in *logits, valid until the next call. Codes:
 * INVALID_ARGUMENT, and whatever comm returns.
 */
mt_code mt_model_forward(mt_model *m, const float *x, size_t local_batch, size_t global_batch,
                         bool training, uint64_t step, uint64_t first_example,
                         const mt_model_comm *comm, const float **logits, mt_err *err);

/*
 * Loss of the last forward: adds the local sum of per-example losses to *loss_sum and correct
 * predictions to *correct, and stores d(loss)/d(logits) scaled by 1/global_batch for the backward.
 * INVALID_ARGUMENT for a label outside [0, num_classes).
 */
mt_code mt_model_loss(mt_model *m, const int32_t *labels, size_t global_batch, double *loss_sum,
                      size_t *correct, mt_err *err);

/*
 * Backward pass of the last training forward + loss: fills every trainable parameter's LOCAL
 * gradient (not yet reduced across replicas; batch-norm backward sums are reduced through comm).
 */
mt_code mt_model_backward(mt_model *m, const mt_model_comm *comm, mt_err *err);

/* One optimizer update of every trainable parameter from its (reduced) gradient. */
void mt_model_apply_gradients(mt_model *m);

/* Metrics of one step. */
typedef struct mt_step_metrics {
    double loss;                /* global mean loss of the batch */
    double accuracy;            /* global fraction of rows whose argmax equals the label */
    double sums[MT_LOSS_NSUMS]; /* the global sums behind them (core/loss), for running means */
    double examples;            /* examples of the global batch */
} mt_step_metrics;

/* Fill sm from a step's global sums (MT_LOSS_NSUMS floats) over global_batch examples; both
 * engines use it, so their metrics are the same arithmetic. */
void mt_step_metrics_fill(mt_step_metrics *sm, const mt_loss_spec *ls, const mt_loss_shape *sh,
                          const float *sums, size_t global_batch);

/*
 * A full training step on the local slice of a global batch: forward, loss, backward, allreduce
 * of gradients (tag MT_MODEL_COMM_GRAD_BASE + index) and metrics (MT_MODEL_COMM_METRICS) through
 * comm, optimizer update. labels: local_batch entries. metrics may be NULL.
 */
mt_code mt_model_train_step(mt_model *m, const float *x, const int32_t *labels, size_t local_batch,
                            size_t global_batch, uint64_t step, uint64_t first_example,
                            const mt_model_comm *comm, mt_step_metrics *metrics, mt_err *err);

/*
 * mt_model_train_step for any loss: labels (local_batch, y_dim) class labels or NULL, targets
 * (local_batch, t_dim) float targets or NULL (mse, mae; binary cross-entropy reads targets when
 * given, else 0/1 labels). The metric sums (MT_LOSS_NSUMS) are reduced with tag
 * MT_MODEL_COMM_METRICS. INVALID_ARGUMENT when the loss's input is missing or a label is out of
 * range.
 */
mt_code mt_model_train_step_targets(mt_model *m, const float *x, const int32_t *labels,
                                    const float *targets, size_t local_batch, size_t global_batch,
                                    uint64_t step, uint64_t first_example,
                                    const mt_model_comm *comm, mt_step_metrics *metrics,
                                    mt_err *err);

/*
 * Inference-mode loss and accuracy over n examples (any n; processed in chunks of max_batch).
 * Adds to *loss_sum and *correct.
 */
mt_code mt_model_evaluate(mt_model *m, const float *x, const int32_t *labels, size_t n,
                          double *loss_sum, size_t *correct, mt_err *err);

/*
 * Inference-mode loss and metric sums over n examples (labels and targets as
 * mt_model_train_step_targets): adds to sums[MT_LOSS_NSUMS] and, when hist is not NULL, to the
 * AUC histogram (core/loss). Turn them into means with mt_loss_metrics.
 */
mt_code mt_model_evaluate_sums(mt_model *m, const float *x, const int32_t *labels,
                               const float *targets, size_t n, double *sums, double *hist,
                               mt_err *err);

#endif
