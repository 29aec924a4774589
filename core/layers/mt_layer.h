/* SPDX-License-Identifier: MIT */
/*
 * mt_layer.h — the layer contract: every layer kind is one module (core/layers/<kind>.c) that
 * both engines run, so a layer's math, shapes, parameters and sharding rules exist once.
 *
 * How it fits: core/model (the single-device reference engine) and core/spmd (the same model
 * over a mesh) both plan a model into an array of mt_layer (shapes, parameters, the mesh dims
 * sharding each activation) through mt_layer_plan, keep an mt_layer_state per layer and device,
 * and run them with mt_layer_graph_forward / mt_layer_graph_backward. What differs between the
 * engines is only the mt_layer_dev they pass: the reference engine's has a one-device "batch"
 * dimension whose allreduce is its mt_model_comm hook and no other dims; the SPMD engine's runs
 * the collectives of its mesh. docs/layers.md shows how to add a kind (the registry is
 * MT_LAYER_KINDS in model/mt_model.h plus mt_layer_registry.c).
 *
 * Activations are (rows, c) views: c is the last axis, sharded over the mesh dim xf (input) or
 * of (output), or -1 for whole; an image's height may be split into bands over hx (output:
 * ho), so a device holds in_loc = in_size / (|xf| |hx|) floats per example (layer_bands.c).
 * A module's forward reads st->in (the first input; joins read st->ins) and writes st->out; its
 * backward gets dy (the output's gradient, batch * out_loc, may be overwritten) and returns dx
 * (batch * in_loc) or NULL when the layer reads the model input. Parameters are bound by the
 * engine before every call: st->pv[slot] / st->pg[slot] are the value and gradient as the math
 * uses them (whole along an FSDP-sharded axis).
 *
 * Invariants a module keeps (docs/layers.md): the same bits for the same inputs on every call
 * (no order depending on pointers or threads); every collective it issues through mt_layer_dev is
 * issued by every device of that dim in the same order; nothing allocated in forward/backward.
 * Threading: plans are read-only after mt_layer_plan; a state belongs to one device thread.
 * Tests: tests/unit/test_layers.c (every registered kind: reference vs fast kernels,
 * finite-difference gradients, the SPMD engine against the reference engine).
 */
#ifndef MT_LAYER_H
#define MT_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/mt_model.h"
#include "status/mt_status.h"

struct cJSON;

#define MT_LAYER_MAX_PARAMS  8 /* parameter slots of one layer */
#define MT_LAYER_MAX_SCRATCH 6

/* ------------------------------------------------------------------ the plan */

/* A planned layer: shapes (GLOBAL, per example), sharding and parameter indices. */
typedef struct mt_layer {
    mt_layer_spec s; /* with the activation the engine applies (mt_model_layer_activation) */
    const struct mt_layer_ops *ops;
    int idx; /* position in the model */
    int in_rank, out_rank;
    size_t in_shape[3], out_shape[3];
    size_t in_size, out_size;          /* floats per example */
    size_t in_c, out_c;                /* width of the last axis */
    size_t in_rows, out_rows;          /* rows per example of the (rows, c) view */
    int in_ranks[MT_LAYER_MAX_INPUTS]; /* every input's rank, shape and sharding */
    size_t in_shapes[MT_LAYER_MAX_INPUTS][3];
    int in_xf[MT_LAYER_MAX_INPUTS];
    size_t in_last[MT_LAYER_MAX_INPUTS]; /* each input's last-axis width (joins) */
    int xf, of;                          /* mesh dim sharding the input / output last axis, or -1 */
    int kin, kout; /* kernel contraction / output axis dims (dense, conv2d), or -1 */
    int vdim;      /* embedding: the mesh dim sharding the vocabulary, or -1 */
    int sdim;      /* sequence parallelism: the mesh dim splitting the rows (positions) of every
                      activation, or -1; then in_rows, out_rows and the *_loc sizes are the device's
                      (the embedding's input: its positions' ids, sharded as features over sdim) */
    int tdim;      /* Megatron-SP: the tensor-parallel dim that also splits the rows of the
                      activations outside the tensor-parallel regions (docs/transformers.md), or
                      -1; rin / rout: tdim when this layer's input / output rows are split over
                      it (its rows and *_loc sizes are then 1/|tdim| of sdim's), else -1 */
    int rin, rout;
    int hx, ho; /* mesh dim sharding the input / output height (axis 0 of an image: each device
                   holds a band of rows, docs/spmd.md), or -1 */
    size_t in_loc, use_loc;         /* local floats per example: input as received / as the math
                                       uses it (after the layer's reshard) */
    size_t out_loc;                 /* local floats per example of the output */
    size_t pi[MT_LAYER_MAX_PARAMS]; /* model parameter index per slot */
    bool has[MT_LAYER_MAX_PARAMS];  /* which slots exist */
    bool needs_acc;    /* the output gradient is accumulated (several readers / a join) */
    bool no_dx;        /* no earlier layer needs this layer's input gradient: each input is the
                          model input or a layer without parameters that needs none either (a
                          flatten of the input, dropout on it): dx is neither computed nor sent,
                          and a layer without parameters runs no backward at all */
    bool grads_shared; /* a later layer uses this layer's parameters too (a dense tied_to it):
                          that layer's backward runs first and writes their gradients, this
                          layer's backward adds to them */
} mt_layer;

/*
 * What the planner offers a module's plan function: parameters are declared through
 * add_param, and the mesh dim sharding a declared parameter's axis is asked with param_dim.
 * follow >= -1 gives the parameter the 1-D layout "sharded over dim follow" (-1: replicated);
 * follow == MT_LAYER_FROM_MAP takes it from the spec's layouts (the engine applies its rules).
 */
#define MT_LAYER_FROM_MAP (-2)
typedef struct mt_layer_planner {
    void *ctx;
    mt_code (*add_param)(void *ctx, mt_layer *l, int slot, const char *what, int rank,
                         const size_t *shape, mt_param_init init, bool trainable, int follow,
                         mt_err *err);
    int (*param_dim)(void *ctx, const mt_layer *l, int slot, int axis); /* -1: unsharded */
    const char *(*dim_name)(void *ctx, int dim);
    size_t (*dim_size)(void *ctx, int dim); /* 1 for dim < 0 */
    const mt_layer *planned; /* the layers planned so far (set by mt_layer_plan): a layer that
                                uses an earlier layer's parameter (tied_to) reads its pi here */
    int sdim;       /* sequence parallelism's dim (mt_layer.sdim), or -1: every engine sets it */
    int tdim;       /* Megatron-SP's dim (mt_layer.tdim), or -1: every engine sets it */
    bool invariant; /* the trainer runs mesh_invariant (core/repro): the leaf kernels' collectives
                       (comm reports); false while planning the layers */
} mt_layer_planner;

/* ------------------------------------------------------------------ running */

/* Per-device services: the reference engine's do no communication. */
typedef struct mt_layer_dev {
    void *ctx;
    /* Sum buf (n floats) over the devices along mesh dim `dim`; dim < 0: nothing to do. */
    mt_code (*allreduce)(void *ctx, int dim, float *buf, size_t n);
    /* Reshard src (rows, c; last axis sharded over from) into dst sharded over to (from != to). */
    mt_code (*reshard)(void *ctx, const float *src, size_t rows, size_t c, int from, int to,
                       float *dst);
    size_t (*dim_size)(void *ctx, int dim); /* 1 for dim < 0 */
    int (*coord)(void *ctx, int dim);       /* this device's coordinate along dim; 0 for dim < 0 */
    /* A non-trainable parameter changed by the forward (moving statistics): store it back. */
    void (*keep)(void *ctx, size_t param);
    /* Before layer idx runs (forward or backward): bind st->pv / st->pg, gather FSDP weights. */
    mt_code (*bind)(void *ctx, int idx);
    /* After layer idx's backward: reduce-scatter its FSDP gradients. NULL: nothing. */
    mt_code (*after_backward)(void *ctx, int idx);
    int bdim;      /* the dim the batch is split over (batch-norm statistics), or -1 */
    uint64_t seed; /* the job's seed (dropout masks) */
    /* Sequence parallelism (only engines that plan sdim >= 0 are asked): dst gets every member's
     * src[0..n) along dim, in group order; dst's member chunks of src[0..n) summed over dim
     * (n / size floats each: this member's). */
    mt_code (*allgather)(void *ctx, int dim, const float *src, size_t n, float *dst);
    mt_code (*reduce_scatter)(void *ctx, int dim, const float *src, size_t n, float *dst);
} mt_layer_dev;

/* One pass over a local batch. */
typedef struct mt_layer_pass {
    size_t batch;        /* local examples */
    size_t global_batch; /* examples over every replica (batch-norm counts) */
    bool training;
    uint64_t step, first; /* dropout keys: step and the global index of the first example */
    bool ref;             /* run the plain reference kernels (mt_kernels_ref.c): tests */
    mt_err *err; /* where a module explains a failure of its own (a bad input value), or NULL */
    /* mesh_invariant training (docs/reproducibility.md; core/repro): the device's leaves (0:
     * fixed_mesh, the layer's usual calls), examples per leaf, and the device's leaf-tree
     * accumulators (count = leaves; room for any parameter, 2 x the widest row, the loss sums)
     * and a scratch with room for any parameter (dense: its kernel transposed) */
    int leaves;
    size_t leaf_examples;
    struct mt_repro_acc *acc_w, *acc_b;
    /* and the height and position leaves' accumulator (core/repro's mt_repro_bands: any count
     * up to MT_REPRO_MAX_LEAVES, room for any parameter plus the widest row) */
    struct mt_repro_acc *acc_h;
    float *scratch;
    /* a dense head tied to an embedding hands its dy and input to the embedding's backward here
     * (core/repro's mt_repro_head; the engine's, one per device) */
    struct mt_repro_head *tied;
    /* The device's work area, shared by every layer: room for the largest mt_layer_work a layer
     * asked for. A layer uses it within one forward or backward call and keeps nothing in it
     * (the next layer's call overwrites it); NULL when no layer asked. */
    float *work;
} mt_layer_pass;

/* Per-device state of one layer. Buffers are owned (mt_layer_state_fini frees them). */
typedef struct mt_layer_state {
    float *out_buf; /* max_batch * out_loc, or NULL when the output aliases the input */
    float *dx_buf;  /* max_batch * in_loc, or NULL (reads the model input, or a join) */
    float *xin;     /* the input resharded as the layer uses it, or NULL */
    float *dxk;     /* dx in the layout the layer used, before resharding back, or NULL */
    void *scr[MT_LAYER_MAX_SCRATCH]; /* the module's own buffers (its alloc says what) */
    float *gacc; /* the output gradient summed over its readers (mt_layer.needs_acc) */
    float *pre;  /* the output before an activation whose backward needs it (gelu), or NULL */
    const float *in, *used; /* input of the last forward; as used (xin or in) */
    const float *ins[MT_LAYER_MAX_INPUTS];
    float *out;                     /* output of the last forward */
    float *gin;                     /* backward: the output's gradient */
    float *pv[MT_LAYER_MAX_PARAMS]; /* bound parameter values (engine) */
    float *pg[MT_LAYER_MAX_PARAMS]; /* bound parameter gradients (engine) */
    bool gfresh;                    /* gacc holds nothing of this step yet */
    bool flag;                      /* module's own flag (dropout: a mask was applied) */
} mt_layer_state;

/* Allocation of a state's buffers, or counting their bytes (plan reports). */
typedef struct mt_layer_alloc {
    bool count_only;
    uint64_t bytes; /* counted so far */
    size_t work;    /* floats of the shared work area the layers need (mt_layer_work): the engine
                       allocates it once per device after every state, and passes it to every
                       forward and backward call (mt_layer_pass.work) */
    bool invariant; /* the engine runs mesh_invariant passes (mt_layer_pass.leaves > 0): a
                       module reserves what its leaf kernels need */
} mt_layer_alloc;

/* *ptr = zeroed n * size bytes (or count them). RESOURCE_EXHAUSTED naming the layer. */
mt_code mt_layer_buf(mt_layer_alloc *a, const mt_layer *l, void **ptr, size_t n, size_t size,
                     mt_err *err);

/* The layer needs n floats of scratch during a forward or backward call only, nothing kept from
 * one call to the next (collectives' blocks, regathered rows): the shared work area grows to n. */
static inline void mt_layer_work(mt_layer_alloc *a, size_t n)
{
    a->work = n > a->work ? n : a->work;
}

/* ------------------------------------------------------------------ a layer kind */

typedef struct mt_layer_ops {
    const char *type; /* the spec's "type" */
    mt_layer_kind kind;
    const char *const *keys;    /* spec keys besides type, name and inputs; NULL-terminated */
    int min_inputs, max_inputs; /* 1, 1 for most; 2, MT_LAYER_MAX_INPUTS for joins */
    bool concat_grads;          /* backward: input k gets columns [off_k, off_k + w_k) of dx */
    bool reads_input_only;      /* the forward never writes or aliases its input buffers */
    bool views_input; /* the forward never writes its input, but its output may be that buffer
                         itself (a view: flatten): the input is only read when its readers only
                         read the output */
    bool bands;       /* runs on height bands (l->hx >= 0); its plan sets l->ho (default l->hx) */
    bool bands_channels; /* on height bands, its channels may be sharded too (kernel axes, xf) */
    bool seq_leaves; /* mesh_invariant with the positions split over sdim: its parameter gradients'
                        sums over positions run on position leaves (mt_layer__pleaves, the seq
                        allreduce inside), or it sums over no positions; false: refused there */
    /* Fill out's kind-specific fields from node (defaults for absent keys). path is
     * "model.layers[i]". INVALID_ARGUMENT "<path>.<key>: why". */
    mt_code (*parse)(const struct cJSON *node, const char *path, mt_layer_spec *out, mt_err *err);
    /* Output shape from l's input shape(s), parameters (planner), kin/kout and the output
     * sharding l->of from the input sharding l->xf and the parameters' layouts. Shape errors
     * name the layer and the shapes. */
    mt_code (*plan)(mt_layer *l, const mt_layer_planner *p, mt_err *err);
    /* State buffers for max_batch examples, through mt_layer_buf. */
    mt_code (*alloc)(const mt_layer *l, mt_layer_state *st, size_t max_batch,
                     const mt_layer_dev *dev, mt_layer_alloc *a, mt_err *err);
    mt_code (*forward)(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps);
    mt_code (*backward)(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx);
    /* Floats one training step moves per mesh dim (add(ctx, dim, n)), for plan reports. */
    void (*comm)(const mt_layer *l, size_t max_batch, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *per_dim, int dim, uint64_t n), uint64_t *per_dim);
    /* Height bands: floats one device sends in one training step's halo exchanges over l->hx
     * (forward and backward), for plan reports. NULL: the kind borrows no rows. */
    uint64_t (*halo)(const mt_layer *l, size_t max_batch, const mt_layer_planner *p);
    /* A job-spec fragment ("model", "mesh", "layouts", ...; model.input_shape set) whose model
     * uses this kind, sharded where the kind allows: tests/unit/test_layers.c checks its
     * gradients, its reference kernels against the fast ones and the mesh against one device. */
    const char *example;
} mt_layer_ops;

/* The module of a kind / of a spec type name (NULL if none). */
const mt_layer_ops *mt_layer_ops_of(mt_layer_kind kind);
const mt_layer_ops *mt_layer_ops_find(const char *type);
/* The registered type names, comma separated ("dense, conv2d, ..."), into buf (for messages). */
void mt_layer_type_names(char *buf, size_t cap);

/* ------------------------------------------------------------------ engines' shared code */

/*
 * Plan layer i of spec into l given the output shapes and shardings of the model input (in_rank,
 * in_shape, in_xf, in_hx: the mesh dims sharding its last axis and an image's height, or -1) and
 * of the earlier, planned layers: input shapes, a join's output shape, ops->plan, then sizes,
 * local widths and the divisibility of sharded axes. INVALID_ARGUMENT naming the layer.
 */
mt_code mt_layer_plan(const mt_job_spec *spec, int i, const mt_layer *planned, int in_rank,
                      const size_t *in_shape, int in_xf, int in_hx, const mt_layer_planner *p,
                      mt_layer *l, mt_err *err);

/* Allocate (or count) st's buffers: the module's, plus gacc when l->needs_acc. */
mt_code mt_layer_state_init(const mt_layer *l, mt_layer_state *st, size_t max_batch,
                            const mt_layer_dev *dev, mt_layer_alloc *a, mt_err *err);
void mt_layer_state_fini(mt_layer_state *st);

/*
 * Forward over the n layers for a local batch x: binds each layer (dev->bind), points its
 * inputs at x or the producers' outputs, runs ops->forward and the layer's relu. *out: the last
 * layer's output (borrowed). On failure *failed is the layer index.
 */
mt_code mt_layer_graph_forward(const mt_layer *ls, mt_layer_state *st, int n, const float *x,
                               const mt_layer_dev *dev, const mt_layer_pass *ps, const float **out,
                               int *failed);

/*
 * Backward from dy (the last layer's output gradient, batch * out_loc): in reverse order, the
 * relu's backward, ops->backward, dev->after_backward, then each input's gradient to its
 * producer (by pointer, or summed into its accumulator in a fixed order).
 */
mt_code mt_layer_graph_backward(const mt_layer *ls, mt_layer_state *st, int n, float *dy,
                                const mt_layer_dev *dev, const mt_layer_pass *ps, int *failed);

/*
 * Sequence parallelism's placement of the positions (load-balanced causal work): T = s · rl
 * positions over s devices, device k holding rl of them. With rl even, device k holds the two
 * blocks k and 2s − 1 − k of T / 2s positions (the zig-zag split: under a causal mask the rows of
 * every device meet the same number of keys); with rl odd, the contiguous block k. Returns the
 * number of blocks (1 or 2, rl / that many positions each) and their first positions in start.
 */
static inline size_t mt_layer_seq_blocks(size_t s, size_t k, size_t rl, size_t start[2])
{
    if (s < 2 || rl % 2 != 0) {
        start[0] = k * rl;
        return 1;
    }
    start[0] = k * (rl / 2);
    start[1] = (2 * s - 1 - k) * (rl / 2);
    return 2;
}

/* The position of local row r (< rl) of device k (mt_layer_seq_blocks). */
static inline size_t mt_layer_seq_position(size_t s, size_t k, size_t rl, size_t r)
{
    size_t start[2], n = mt_layer_seq_blocks(s, k, rl, start), len = rl / n;
    return start[r / len] + r % len;
}

/* Shape text "(28, 28, 1)" into buf. */
void mt_layer_shape_text(char *buf, size_t cap, int rank, const size_t *shape);

#endif
