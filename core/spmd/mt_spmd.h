/* SPDX-License-Identifier: MIT */
/*
 * mt_spmd.h — the SPMD trainer: one model sharded over a mesh (DTensor's data-, model- and
 * spatial-parallel schemes), every device holding only its shards of the weights, the optimizer
 * state and its slice of the batch, every device running the same step.
 *
 * How it fits: `meshtrain train --local` (client/cmd_train.c) and the tests build an mt_spmd
 * from a parsed job spec (core/model), a mesh (core/mesh), a layout map with the input layout
 * (core/layout) and a collective world (core/coll). Kernels come from core/tensor, initial values
 * from mt_model_param_init (shard-exact), checkpoints go through core/ckpt.
 *
 * How layouts turn into communication (docs/spmd.md has the full table). An activation is
 * (batch, features): its batch axis is sharded over the input layout's batch dimension B (or
 * replicated) and its last axis over at most one feature dimension F; it is identical on every
 * other mesh dimension. For dense y = xW + b with kernel layout [K_in, K_out]:
 *   * x's feature dimension differs from K_in: x is resharded first (allgather over x's dim,
 *     then a local slice along K_in);
 *   * K_in sharded: the local matmul is a partial sum, allreduced over K_in, then the bias added;
 *   * K_out sharded: y is sharded on features over K_out, with no communication; the bias and
 *     a following BatchNorm's parameters follow that axis (their layouts are derived, a map
 *     entry contradicting them is an error);
 *   * backward mirrors it: dx partials are allreduced over K_out and resharded back.
 * conv2d: batch-sharded input (channel-sharded inputs are allgathered), output channels may be
 * sharded (kernel layout [unsharded, unsharded, unsharded, D]). BatchNorm statistics are summed
 * over B (global batch). Flatten of a channel-sharded image and the logits are allgathered.
 * Loss, accuracy and every weight gradient are allreduced over B (gradients, loss, accuracy
 * and the next step's example count are fused into one bucket: one allreduce per step). The
 * optimizer updates the local shard. A weight axis sharded over B (FSDP) is stored sliced with its
 * slots; by default (spec fsdp_reshard_after_forward) it is allgathered into a per-layer scratch
 * before its layer's forward and backward and its gradient reduce-scattered over B; otherwise
 * the gathered copy is kept from the first forward after an update and its whole gradient rides
 * in the bucket, each device keeping its slice. Both give the same bits. Graph models (add,
 * concatenate) route gradients to every reader's producer in reverse list order.
 * Sequence parallelism: when an embedding reads the model input (token ids), the input layout's
 * axis 1 over a dim S splits the positions, and every activation's rows with them; attention
 * gathers the rows over S, the loss reads the local rows' labels, and the bucket is allreduced
 * over B and then over S (a per-layer FSDP gradient over S before its reduce-scatter over B).
 *
 * Equivalence: for any mesh and layouts, K steps give the weights of K steps on one device with
 * the same seed and global batch up to float rounding; the same job on the same mesh twice is
 * bit-identical (the collectives reduce in a fixed order).
 *
 * Threading: with several mesh devices in this process an mt_spmd owns one thread per device
 * (started by mt_spmd_new, joined by mt_spmd_free); with one, the calling host thread runs it.
 * Its public functions are called by ONE host thread, block until every local device has
 * finished, and must not be called concurrently. Tests:
 * tests/unit/test_spmd.c, tests/integration/test_train_mesh.sh; bench: bench/bench_spmd.c.
 */
#ifndef MT_SPMD_H
#define MT_SPMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coll/mt_coll.h"
#include "data/mt_idx.h"
#include "digest/mt_digest.h"
#include "layout/mt_layout.h"
#include "mesh/mt_mesh.h"
#include "model/mt_model.h"
#include "status/mt_status.h"
#include "train/mt_train.h"

struct cJSON;

typedef struct mt_spmd mt_spmd;

/* ------------------------------------------------------------------ job configuration */

/* The SPMD part of a job spec: "mesh", "layouts", "input_layout" and "checkpoint". */
typedef struct mt_spmd_config {
    mt_mesh *mesh;          /* owned; NULL when the spec has no "mesh" */
    mt_layout_map *layouts; /* owned; never NULL after a successful parse (may be empty) */
    int64_t ckpt_every;     /* checkpoint.every_steps, 0 = none */
    int ckpt_keep;          /* checkpoint.keep, default 3 */
} mt_spmd_config;

/*
 * Parse those keys of the spec JSON text (json, len bytes, borrowed). On MT_OK *cfg holds owned
 * objects (mt_spmd_config_fini). INVALID_ARGUMENT with the JSON path
 * ("checkpoint.every_steps: must be a positive integer"), RESOURCE_EXHAUSTED.
 */
mt_code mt_spmd_config_parse(const char *json, size_t len, mt_spmd_config *cfg, mt_err *err);

/* mt_spmd_config_parse from a parsed JSON root (borrowed). */
mt_code mt_spmd_config_from_json(const struct cJSON *root, mt_spmd_config *cfg, mt_err *err);

/* Free what the config owns and zero it; zeroed memory is a no-op. */
void mt_spmd_config_fini(mt_spmd_config *cfg);

/* ------------------------------------------------------------------ trainer */

/*
 * Build the trainer: spec (borrowed for the call), mesh and map (borrowed; must outlive the
 * trainer), per-example input shape in_shape[in_rank] (1..3), global batches of at most
 * max_global_batch examples. world: a collective world of mt_mesh_num_devices ranks where rank p
 * is mesh position p (borrowed, must outlive the trainer), or NULL to create an in-process world.
 * Only the ranks that live in this process (mt_coll_world_comm != NULL) get a thread and shards;
 * with an nng world spread over processes, each process builds its trainer for the same spec and
 * calls the same sequence of steps with the same global batches (each device takes its slice).
 * Every device allocates and initialises only its own shards. Codes: INVALID_ARGUMENT with
 * a JSON path (`layouts["dense_1\\.kernel"][1]: mesh has no dimension 'model' (mesh batch=8)`,
 * a conv kernel sharded on other than its output-channel or batch-dim axes,
 * a bias layout that does not follow its kernel, no rank of the world in this process), the
 * model's codes, RESOURCE_EXHAUSTED,
 * INTERNAL (thread creation). On failure *out = NULL.
 */
mt_code mt_spmd_new(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                    int in_rank, const size_t *in_shape, size_t max_global_batch,
                    mt_coll_world *world, mt_spmd **out, mt_err *err);

/* Stop and join the device threads, free every shard. NULL is a no-op. */
void mt_spmd_free(mt_spmd *s);

/* What one device of a mesh holds and hands to collectives per training step (mt_spmd_check). */
/* One layer of a plan (mt_spmd_plan_info.layers). */
typedef struct mt_spmd_layer_plan {
    char name[32], type[24];
    char shape[48];                        /* the output's global shape per example, "(128, 384)" */
    uint64_t activation_bytes;             /* its buffers on one device for a local batch */
    uint64_t comm_bytes[MT_MESH_MAX_DIMS]; /* float32 bytes its collectives move per step */
} mt_spmd_layer_plan;

typedef struct mt_spmd_plan_info {
    uint64_t weight_bytes;     /* the largest per-device sum of stored parameter shards */
    uint64_t slot_bytes;       /* optimizer slots of those shards (Adam m + v, SGD momentum) */
    uint64_t gathered_bytes;   /* FSDP working copies: allgathered values and whole gradients */
    uint64_t activation_bytes; /* layer outputs, inputs' gradients and scratch for a local batch */
    uint64_t work_bytes;       /* of which the work area the layers share (mt_layer_work) */
    int ndims;                 /* mesh dimensions */
    uint64_t comm_bytes[MT_MESH_MAX_DIMS]; /* per mesh dim: float32 bytes one device hands to
                                              collectives in one training step (payload, before
                                              the algorithm's factor) */
    int halo_dim;               /* the dim an image's height is sharded over (bands), or -1 */
    uint64_t halo_bytes;        /* bytes one device sends per training step in the bands' halo
                                   exchanges (rows the neighbours' conv2d and pooling windows
                                   borrow, forward and backward; within comm_bytes[halo_dim]) */
    mt_spmd_layer_plan *layers; /* in: NULL, or room for every layer (at most 256); filled */
    int n_layers;               /* out: layers filled */
} mt_spmd_plan_info;

/*
 * Run mt_spmd_new's planning (shapes, layouts, sharding rules) without devices, threads or a
 * world, with the same messages, for global batches of global_batch examples; fill *info (may be
 * NULL). This is how `meshtrain plan` and SubmitJob validate a spec exactly as the trainer does.
 * Pure; any thread. Codes: as mt_spmd_new's planning (INVALID_ARGUMENT, RESOURCE_EXHAUSTED).
 */
mt_code mt_spmd_check(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                      int in_rank, const size_t *in_shape, size_t global_batch,
                      mt_spmd_plan_info *info, mt_err *err);

/*
 * One training step on a GLOBAL batch x (n * input_size floats, borrowed) with labels (n, y_dim):
 * each device copies its slice (rows by its batch coordinate with tf.distribute's rebatch rule,
 * features by its feature coordinate), then forward, loss (core/loss: the sum over the labels /
 * their count), backward, gradient allreduce, optimizer update. step keys the collectives and
 * dropout; first_example is the global index of x's first example (dropout masks). metrics may be
 * NULL. Codes: INVALID_ARGUMENT (n = 0 or > max_global_batch, a label out of range), the
 * collectives' codes (DEADLINE_EXCEEDED, UNAVAILABLE ...) naming the device.
 */
mt_code mt_spmd_step(mt_spmd *s, const float *x, const int32_t *labels, size_t n, uint64_t step,
                     uint64_t first_example, mt_step_metrics *metrics, mt_err *err);

/*
 * mt_spmd_step for any loss (core/loss): labels (n, y_dim) class labels or NULL, targets (n,
 * t_dim) float targets or NULL; which one the spec's loss reads must be given
 * (INVALID_ARGUMENT "loss: mse needs the batch's float targets" otherwise). The loss is the mean
 * over every label (or output) of the global batch.
 */
mt_code mt_spmd_step_targets(mt_spmd *s, const float *x, const int32_t *labels,
                             const float *targets, size_t n, uint64_t step, uint64_t first_example,
                             mt_step_metrics *metrics, mt_err *err);

/* One replica's batch for mt_spmd_step_pieces (borrowed for the call). */
typedef struct mt_spmd_piece {
    const float *x;         /* (n, input_size) row-major; may be NULL when n == 0 */
    const int32_t *y;       /* (n, y_dim) class labels, or NULL when the loss reads targets */
    size_t n;               /* examples; 0 = an empty replica batch (zero gradient) */
    uint64_t first_example; /* global example index of the first row (keys dropout masks) */
    const float *t;         /* (n, t_dim) float targets (mse, mae, binary cross-entropy), or NULL */
    bool global_order;      /* the pieces are consecutive slices of the one-device global batch in
                               batch-coordinate order (mesh_invariant needs it) */
} mt_spmd_piece;

/*
 * A training step from per-replica batches (the distributed input pipeline's form): pieces has
 * mt_spmd_batch_replicas(s) entries indexed by batch coordinate; only the entries of this
 * process's devices are read (the others may be empty). The devices first agree on the step's
 * example count with a one-float allreduce of their piece sizes over the batch dimension: the
 * loss is the per-example sum divided by that count (*global_count), and when it is 0 (every
 * pipeline of the job ran out) no device trains and every process gets OUT_OF_RANGE at the same
 * step, so uneven pipelines never hang or mismatch a collective. Codes: OUT_OF_RANGE (as said),
 * INVALID_ARGUMENT (a piece larger than the per-device capacity, a label out of range), the
 * collectives' codes.
 */
mt_code mt_spmd_step_pieces(mt_spmd *s, const mt_spmd_piece *pieces, uint64_t step,
                            size_t *global_count, mt_step_metrics *metrics, mt_err *err);

/*
 * mt_spmd_step_pieces, announcing the NEXT step's piece sizes: next_n (mt_spmd_batch_replicas(s)
 * entries by batch coordinate, only this process's entries read; NULL = unknown) rides as one
 * more float in this step's gradient allreduce, so the next call, for step + 1, knows its
 * example count without a collective of its own (and when that count is 0 it returns
 * OUT_OF_RANGE at once, in every process alike). The pieces of that next call must have exactly
 * the announced sizes (INVALID_ARGUMENT otherwise, before any device starts). Every process of
 * the world must announce at the same steps (SPMD). Same math, same bits as without announcing.
 * Codes: as mt_spmd_step_pieces, INVALID_ARGUMENT for a next size above the per-device capacity.
 */
mt_code mt_spmd_step_pieces_next(mt_spmd *s, const mt_spmd_piece *pieces, const size_t *next_n,
                                 uint64_t step, size_t *global_count, mt_step_metrics *metrics,
                                 mt_err *err);

/* Size of the batch mesh dimension (replicas in sync); 1 when the batch is not sharded. */
int mt_spmd_batch_replicas(const mt_spmd *s);
/* Batch coordinate of mesh position p (any process), 0 when not sharded; -1 for a bad p. */
int mt_spmd_batch_coord(const mt_spmd *s, int p);
/* The mesh dimension the input's batch axis is sharded over (the input layout's first axis, else
 * the dimension named "batch"), as mt_spmd_new decides it; -1 when the batch is not sharded. */
int mt_spmd_batch_dim(const mt_mesh *mesh, const mt_layout_map *map);

/* Inference-mode loss sum (per example: the mean over its labels) and correct count (labels)
 * over n examples (any n), added to the outputs. */
mt_code mt_spmd_evaluate(mt_spmd *s, const float *x, const int32_t *labels, size_t n,
                         double *loss_sum, size_t *correct, mt_err *err);

/*
 * Inference-mode loss and metric sums (core/loss, MT_LOSS_NSUMS) over n examples with labels or
 * targets as mt_spmd_step_targets, added to sums, and the AUC histogram to hist (may be NULL;
 * filled when the spec's metrics include auc). Collective: every process calls it with the same
 * data. Codes: INVALID_ARGUMENT (labels), the collectives'.
 */
mt_code mt_spmd_evaluate_sums(mt_spmd *s, const float *x, const int32_t *labels,
                              const float *targets, size_t n, double *sums, double *hist,
                              mt_err *err);

/* The model output's (rows, c) view (core/loss). */
mt_loss_shape mt_spmd_output_shape(const mt_spmd *s);

/* Whether the spec's loss fits the model and data with y_dim labels or t_dim targets per example
 * (mt_loss_check): INVALID_ARGUMENT naming "loss". */
mt_code mt_spmd_check_data(const mt_spmd *s, size_t y_dim, size_t t_dim, mt_err *err);

/* Number of parameters (including non-trainable state, in mt_model order). */
size_t mt_spmd_param_count(const mt_spmd *s);
/*
 * Parameter i of device position p (borrowed; offsets/local_shape describe the shard; values
 * must only be read between calls). NULL when out of range or p is another process's device.
 */
const mt_model_param *mt_spmd_param(const mt_spmd *s, int p, size_t i);
/* The effective layout of parameter i (derived for biases and batch-norm state). */
const mt_layout *mt_spmd_param_layout(const mt_spmd *s, size_t i);

/*
 * Assemble the global value of parameter `name` from this process's shards into out (product of
 * its global shape floats, caller memory; slices held only elsewhere are left as they were).
 * NOT_FOUND for an unknown name.
 */
mt_code mt_spmd_param_gather(const mt_spmd *s, const char *name, float *out, mt_err *err);

/* Optimizer iterations (Adam's t), the same on every device. */
int64_t mt_spmd_iterations(const mt_spmd *s);

/* Training position stored in a checkpoint. */
typedef struct mt_spmd_position {
    uint64_t step;           /* global steps done */
    uint64_t epoch;          /* 0-based epoch the next step belongs to */
    uint64_t input_position; /* examples of that epoch already consumed */
    /* the run's validation bookkeeping (best value and step, early stopping's patience: core/
       train's mt_train_val_text), or "": saved as the text tensor MT_SPMD_VAL_META (not model
       state: the state root leaves it out), restored when the checkpoint has it, so a resumed
       run keeps its best checkpoint and its patience */
    char val[MT_TRAIN_VAL_TEXT];
} mt_spmd_position;

/* The checkpoint tensor of mt_spmd_position.val (MT_CKPT_META_PREFIX: exports copy it into their
 * metadata as "meshtrain.validation"). */
#define MT_SPMD_VAL_META "meta/meshtrain.validation"

/*
 * Save a mesh-independent checkpoint at path: every parameter in its global shape assembled from
 * the shards, optimizer slots as "<param>/adam_m", "/adam_v" or "/momentum", the iteration count
 * as "optimizer/iterations" (I64), the position and spec_json (borrowed, may be NULL).
 * The shards of this process must cover every tensor (true in one process, or when each process
 * holds a full replica and the update is not sharded; otherwise every process calls
 * mt_spmd_save_gathered, see mt_spmd_save_needs_gather). After sharded updates in one process it
 * first allgathers the optimizer slots over the batch dim. Codes: mt_ckpt's (I/O,
 * RESOURCE_EXHAUSTED; FAILED_PRECONDITION "shards cover 30 of 40 elements" when they do not, or
 * "optimizer slots: ..." after sharded updates in a world spread over processes).
 */
mt_code mt_spmd_save(mt_spmd *s, const char *path, const mt_spmd_position *pos,
                     const char *spec_json, mt_err *err);

/*
 * Text metadata that every later checkpoint carries as the U8 tensor "meta/<key>"
 * (MT_CKPT_META_PREFIX, core/ckpt: not model state, copied into exports' "__metadata__"); key
 * and text are borrowed and copied, a second call replaces the first. The input pipeline sets
 * "meshtrain.tokenizer" (the vocabulary of a tokens dataset). Codes: RESOURCE_EXHAUSTED.
 */
mt_code mt_spmd_set_meta(mt_spmd *s, const char *key, const char *text, mt_err *err);

/*
 * True when a checkpoint of this trainer needs mt_spmd_save_gathered: the world spreads over
 * processes (some ranks are not in this process) and some parameter is sharded, or the update is
 * (mt_spmd_sharded_update: each replica keeps only its chunk of the optimizer slots current), so
 * the process holding rank 0 may lack shards. The same answer in every process of the world.
 */
bool mt_spmd_save_needs_gather(const mt_spmd *s);

/*
 * Whether the data-parallel replicas shard the optimizer update (ZeRO-1, docs/spmd.md): the
 * gradient bucket is reduce-scattered over the batch dim, each replica applies the optimizer to
 * its chunk of the fused gradients, and an allgather brings the updated weights; the same bits as
 * the replicated update. On by default when the mesh has 2 or more replicas (in this process or
 * in several), no sequence dim, no parameter sharded over the batch dim (FSDP) and no global-norm
 * clipping. The optimizer slots of a replica are then current only in its chunk until a
 * checkpoint or digest allgathers them (mt_spmd_param shows them as they are); over processes
 * every checkpoint is gathered (mt_spmd_save_needs_gather) and every digest is collective.
 * mt_spmd_set_sharded_update(s, false) makes every replica update every weight (comparisons); true
 * restores the default where it applies. Call it in every process of the world before the first
 * step, the same way. Calling thread only.
 */
bool mt_spmd_sharded_update(const mt_spmd *s);
void mt_spmd_set_sharded_update(mt_spmd *s, bool on);

/*
 * True when a step reads the caller's input rows where they are instead of copying each device's
 * rows into its own buffer first: the input's features are not sharded, it is not split into
 * height bands, and every layer reading it only reads it — directly (dense, conv2d, the joins,
 * ...) or through views of it (flatten, dropout: their own readers must then only read). Fixed when
 * the trainer is made; any thread.
 */
bool mt_spmd_rows_in_place(const mt_spmd *s);

/*
 * Collective save of the same mesh-independent checkpoint as mt_spmd_save (byte for byte) when
 * the shards are spread over processes. EVERY process of the world calls it at the same point of
 * the run (SPMD: between the same two steps, with the same pos and spec_json); the process holding
 * rank 0 writes path (borrowed; ignored, may be NULL, elsewhere). Tensor by tensor (weights, then
 * their optimizer slots), the devices holding one copy of each shard allgather them over the
 * collectives (tags apart from the training steps'; the world's deadline applies) and the writer
 * assembles the global tensor; a replicated tensor moves nothing. Memory: one buffer of the
 * tensor's global size per gathering device, freed before the next tensor. Blocks until done.
 * A failure to write on rank 0's process does not stop its part in the gathers (the others finish
 * normally); it is returned at the end. Codes: mt_ckpt's (I/O, RESOURCE_EXHAUSTED),
 * INVALID_ARGUMENT (path NULL on the writer), the collectives' (DEADLINE_EXCEEDED naming the
 * missing rank, UNAVAILABLE, INVALID_ARGUMENT for a process making another call) naming the device.
 */
mt_code mt_spmd_save_gathered(mt_spmd *s, const char *path, const mt_spmd_position *pos,
                              const char *spec_json, mt_err *err);

/*
 * Agreement over the whole world: every process calls it at the same point with its own flag
 * `mine`; *any becomes true when some process passed true (one 1-float allreduce over all ranks).
 * Blocks. Codes: the collectives', RESOURCE_EXHAUSTED; *any is false on failure.
 */
mt_code mt_spmd_flag_any(mt_spmd *s, bool mine, bool *any, mt_err *err);

/*
 * Before the first step of a run over processes (the next step is `step`: 0, or a resume's):
 * one agreement over every rank, so that connecting the data plane and waiting for the slowest
 * process happen here and not inside that step's time. Tagged (step, MT_SPMD_START_SEQ) — the
 * step's own number, so stall diagnoses and the test stall hook see step `step`, and a sequence
 * number no collective of a step uses. Every process calls it at the same point. Blocks. Codes:
 * the collectives' (DEADLINE_EXCEEDED naming the missing rank, UNAVAILABLE, ...),
 * RESOURCE_EXHAUSTED.
 */
#define MT_SPMD_START_SEQ 0xFFFFFFFFu
mt_code mt_spmd_start_together(mt_spmd *s, uint64_t step, mt_err *err);

/*
 * Restore from a checkpoint saved on ANY mesh and layout: each device reads only its slices
 * (mt_ckpt_read_slice; in a multi-process world, only this process's devices). pos (may be NULL)
 * receives the stored position. Codes: mt_ckpt_open's (NOT_FOUND, DATA_LOSS naming the tensor ...),
 * FAILED_PRECONDITION (a parameter or optimizer slot is missing or has another shape: the
 * checkpoint belongs to another model or optimizer).
 */
mt_code mt_spmd_restore(mt_spmd *s, const char *path, mt_spmd_position *pos, mt_err *err);

/*
 * The Merkle root (core/digest, docs/reproducibility.md) of the logical training state: every
 * tensor mt_spmd_save writes (weights, optimizer slots, "optimizer/iterations"), hashed from the
 * shards of this process's devices in fixed blocks of the global order, so the root does not
 * depend on the mesh or the layouts and equals the state root of a checkpoint saved at this
 * point (`meshtrain digest`). Call between steps (reads the shards). The shards of this process
 * must cover every tensor (one process, or a full replica per process); otherwise
 * FAILED_PRECONDITION ("tensor 'x': no shard holds element N"). Blocks while hashing; the
 * calling thread only. Codes: FAILED_PRECONDITION, RESOURCE_EXHAUSTED.
 */
mt_code mt_spmd_digest(mt_spmd *s, mt_digest *out, mt_err *err);

/*
 * mt_spmd_digest for any world, the same root bit for bit. COLLECTIVE when the mesh has several
 * devices and every layout is replicated, and when the world spreads over processes and some
 * parameter is sharded (mt_spmd_save_needs_gather): every process calls it at the same point of
 * the run. On replicas the devices share the leaves out (each hashes 1/ndev of the state's
 * blocks from its replica on its own thread, then an allgather of the leaf digests tagged in its
 * own step space; ndev × 32 bytes per 4096 elements of memory); with sharded parameters the
 * shards travel to rank 0's devices as for mt_spmd_save_gathered (same tags, same memory: one
 * tensor at a time) and the process holding rank 0 hashes them. Otherwise (one process, sharded
 * layouts) the process holding rank 0 computes mt_spmd_digest. *have: true where *out holds the
 * root (the process holding rank 0), false elsewhere. Codes: mt_spmd_digest's, the collectives'
 * (as mt_spmd_save_gathered's).
 */
mt_code mt_spmd_digest_world(mt_spmd *s, mt_digest *out, bool *have, mt_err *err);

/* Bytes of parameter i held by device position p (value + gradient + optimizer slots). */
size_t mt_spmd_param_bytes(const mt_spmd *s, int p, size_t i);

/* ------------------------------------------------------------------ training loop */

/*
 * Load the spec's dataset into memory (train and, when the spec has one, test; *test zeroed
 * otherwise), as flat float32 examples (h = w = 1, c = features, except IDX images) with int32
 * labels, and the per-example input shape the model sees (in_rank, in_shape[3]: the spec's
 * model.input_shape when given, else the dataset's). Formats: "idx" (spec->dataset paths),
 * "text" (core/data: label<TAB>text files, TF-IDF fitted on the training split, "max_tokens"
 * features; paths relative to base_dir), "synthetic" (generated, see docs/spmd.md: "examples",
 * "test_examples", "features", "classes", "seed"). spec_json (borrowed) is the spec text for the
 * non-IDX sections. Outputs owned by the caller (mt_idx_set_fini). Codes: the sources' codes
 * (NOT_FOUND naming the file ...), INVALID_ARGUMENT ("dataset.features: ..."),
 * RESOURCE_EXHAUSTED.
 */
/* The "synthetic" dataset section's fields (docs/spmd.md#datasets). */
typedef struct mt_spmd_synthetic {
    size_t examples, test_examples, features, classes, seed;
} mt_spmd_synthetic;

/*
 * Parse a "synthetic" dataset section (node, borrowed) with the spec's seed as the default.
 * INVALID_ARGUMENT naming the field ("dataset.features: must be an integer in 0..1000000").
 */
mt_code mt_spmd_synthetic_parse(const mt_job_spec *spec, const struct cJSON *node,
                                mt_spmd_synthetic *out, mt_err *err);

/*
 * Load a whole data set (the spec's IDX files, the generated "synthetic" section `dataset`, or
 * any core/data format decoded whole; `dataset` borrowed, may be NULL for IDX) into train, test
 * and — with the spec's "validation.path" — val (owned by the caller: mt_idx_set_fini; val may
 * be NULL, then no file is read) and the per-example input shape. Labels (n, y_dim) and float
 * targets ride along. Codes: the readers' (NOT_FOUND, DATA_LOSS, INVALID_ARGUMENT).
 */
mt_code mt_spmd_load_data(const mt_job_spec *spec, const struct cJSON *dataset,
                          const char *base_dir, mt_idx_set *train, mt_idx_set *test,
                          mt_idx_set *val, int *in_rank, size_t *in_shape, mt_err *err);

/* Options of mt_spmd_run_data. */
typedef struct mt_spmd_run_opts {
    int64_t epochs, steps; /* overrides of the spec (0 = keep); steps is a TOTAL step cap */
    const char *save_dir;  /* write "ckpt-<step>.mtc" there (borrowed), or NULL */
    int64_t ckpt_every;    /* save every N steps (0: only at the end) when save_dir is set */
    int ckpt_keep;         /* keep the N newest checkpoints (0: keep all) */
    const char *resume;    /* checkpoint to continue from (borrowed), or NULL */
    const char *spec_json; /* stored in every checkpoint (borrowed), may be NULL */
    mt_coll_world *world;  /* network world for a multi-process run (borrowed), or NULL; only the
                              process holding rank 0 writes checkpoints (the others take part in
                              the gather when mt_spmd_save_needs_gather) */
    /* called after each checkpoint is written (ctx = the progress ctx, path, step), e.g. to
       upload it; may be NULL; a non-OK return stops the run. When set, a checkpoint this
       machine's disk has no room for (RESOURCE_EXHAUSTED) is skipped instead of stopping the
       run: it is called with path NULL and err saying why (OK trains on) */
    mt_code (*on_saved)(void *ctx, const char *path, uint64_t step, mt_err *err);
    /* called when progress stopped the run: true = checkpoint the last step before returning */
    bool (*save_on_stop)(void *ctx);
    /* called with the state digest (mt_spmd_digest) after step `step` at the steps the spec's
       "digest_every" asks for, every epoch end and every checkpoint (ctx = the progress ctx);
       may be NULL (no digest is computed); a non-OK return stops the run */
    mt_code (*on_digest)(void *ctx, int64_t step, const mt_digest *root, mt_err *err);
    /* called after the best checkpoint (MT_SPMD_BEST_CKPT in save_dir, "validation.best") is
       written, on the process holding rank 0; may be NULL; a non-OK return stops the run */
    mt_code (*on_best)(void *ctx, const char *path, uint64_t step, mt_err *err);
    /* the resume checkpoint is another run's (a job started with --init-from): its weights and
       position are taken, its validation bookkeeping (best value and step, patience) is not */
    bool resume_fresh_validation;
} mt_spmd_run_opts;

#define MT_SPMD_RUN_OPTS_DEFAULTS                                                                  \
    {                                                                                              \
        0, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false                          \
    }

/* The best checkpoint's file name in the save directory (the spec's "validation.best"): a
 * checkpoint like the others (its position says its step), overwritten at each new best and
 * never removed by the retention of the newest checkpoint.keep. */
#define MT_SPMD_BEST_CKPT "best.mtc"

/*
 * The training loop of core/train (same epochs, per-epoch permutation from (seed, epoch), short
 * last batch, progress events, evaluation at each epoch end) with every step run by mt_spmd on
 * `mesh` with `map` (both borrowed); on a 1-device mesh the numbers equal mt_train_run_data's.
 * Checkpoints hold the position (step, epoch, examples of the epoch consumed) so a resumed run,
 * on any mesh, continues with the same batches. With a world spread over processes and sharded
 * parameters (mt_spmd_save_needs_gather) every process takes part in each checkpoint
 * (mt_spmd_save_gathered); when opts has ckpt_every and save_on_stop, the processes also agree
 * after each progress event whether one of them stops (mt_spmd_flag_any) and then all save that
 * step, so the stop checkpoint exists even when the stopping process is not rank 0's.
 * Validation (the spec's "validation"; val borrowed, or NULL: with "split" the last examples of
 * train are held out, mt_train_split_validation): evaluations, early stopping and the best
 * checkpoint as mt_train_loop says. Codes: mt_spmd_new's, mt_spmd_step's, mt_spmd_save/restore's,
 * the progress callback's, INVALID_ARGUMENT when the loss does not fit the data.
 */
mt_code mt_spmd_run_data(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                         const mt_spmd_run_opts *opts, const mt_idx_set *train,
                         const mt_idx_set *val, const mt_idx_set *test, int in_rank,
                         const size_t *in_shape, mt_train_progress_fn progress, void *ctx,
                         mt_train_result *res, mt_err *err);

/* Whether a job's dataset goes through per-worker input pipelines (mt_spmd_run_pipeline): every
 * format of core/data ("idx", "csv", "text"); "synthetic" is generated whole (mt_spmd_run_data). */
bool mt_spmd_uses_pipeline(const mt_job_spec *spec);

/*
 * The training loop of mt_spmd_run_data fed by this process's own input pipeline (core/data,
 * docs/input-pipeline.md): the spec's `dataset` section (spec_json, borrowed; paths relative to
 * base_dir) is opened as one pipeline per worker process with an input context (pipelines = the
 * processes' blocks of batch coordinates, its id, the replicas it feeds, the global batch), so
 * under FILE a process decodes only its files. The pipeline prefetches `dataset.prefetch` steps
 * on its thread while the step runs; left out of the spec, 2, or 0 (no thread) when the job's
 * device threads on this host fill its cores and some are in other processes (the world's
 * mt_coll_world_host_ranks; logged at info). Every step goes through mt_spmd_step_pieces, whose
 * count allreduce makes all replicas agree on the last step of an epoch. rank_process (borrowed,
 * mesh-devices entries, may be NULL) gives the process index of every world rank; NULL with a
 * multi-process world means one pipeline that every process runs whole (correct, reads
 * everything). Equivalence: under DATA with global batching (the default AUTO on one file, and
 * the default full reshuffle per epoch when shuffle_buffer is 0) every replica gets the examples
 * of its batch coordinate in the one-device global batch, so the result does not depend on how
 * the mesh is spread over processes, and a 1-device mesh equals mt_train_run_data. Codes: as
 * mt_spmd_run_data plus the data sources' (file:line) and the spec parser's.
 */
mt_code mt_spmd_run_pipeline(const mt_job_spec *spec, const struct cJSON *dataset,
                             const char *base_dir, const mt_mesh *mesh, const mt_layout_map *map,
                             const mt_spmd_run_opts *opts, const int *rank_process,
                             mt_train_progress_fn progress, void *ctx, mt_train_result *res,
                             mt_err *err);

/* ------------------------------------------------------------------ the one entry point */

/* A job as every trainer sees it (all borrowed for the call). */
typedef struct mt_spmd_job {
    const mt_job_spec *spec;      /* parsed (core/model) */
    const struct cJSON *dataset;  /* the spec's "dataset" section, or NULL (the defaults) */
    const char *base_dir;         /* relative input-pipeline paths resolve against it */
    const mt_mesh *mesh;          /* the mesh; a run without one is batch=1 */
    const mt_layout_map *layouts; /* layouts and input layout, never NULL */
    const int *rank_process;      /* process index of every world rank, or NULL (one process) */
} mt_spmd_job;

/*
 * Train a job: the one entry point of `meshtrain train --local` and the worker's task. Chooses
 * the input: the spec's input pipeline (csv/text/idx with "train": mt_spmd_run_pipeline, one
 * pipeline per process) or a whole data set loaded once (IDX files, synthetic:
 * mt_spmd_load_data + mt_spmd_run_data). Options, callback, result and codes as those.
 */
mt_code mt_spmd_train(const mt_spmd_job *job, const mt_spmd_run_opts *o,
                      mt_train_progress_fn progress, void *ctx, mt_train_result *res, mt_err *err);

#endif
