/* SPDX-License-Identifier: MIT */
/*
 * spmd.c — the SPMD trainer (contract in mt_spmd.h): planning of shard layouts per layer, the
 * per-device forward/backward with the collectives the layouts imply, the device threads and
 * checkpoint save/restore through core/ckpt.
 *
 * DESIGN: the host thread never computes; it posts a job (step, evaluate) to every device thread
 * and waits for all of them. A device touches only its own `dev` struct and talks to the others
 * only through mt_coll_* on its comm. Every device issues the same collectives in the same order
 * (SPMD), so the comm's automatic sequence numbers agree; a group of size 1 is still called.
 * Activation layout per layer boundary: `xf` = mesh dimension sharding the last (feature or
 * channel) axis, or -1. Reshards view an activation as (rows, c) with c the last axis: an
 * allgather over a dimension yields p blocks (rows, c/p) that are interleaved into (rows, c).
 * Threading: see mt_spmd.h. Tests: tests/unit/test_spmd.c.
 */
#include "spmd/mt_spmd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "clock/mt_clock.h"
#include "coll/mt_coll_progress.h"
#include "data/mt_data.h"
#include "layers/mt_layer.h"
#include "optim/mt_optim.h"
#include "repro/mt_repro.h"
#include "rng/mt_rng.h"
#include "tensor/mt_tensor.h"

typedef struct dev {
    struct mt_spmd *s;
    int pos;                       /* mesh position = world rank */
    int coords[MT_MESH_MAX_DIMS];  /* coordinate per mesh dim */
    int *groups[MT_MESH_MAX_DIMS]; /* ranks of the group along each mesh dim */
    mt_coll_comm *comm;            /* borrowed from the world; NULL: device of another process */
    mt_model_param *params;        /* local shards, mt_model order */
    float **wval, **wgrad;         /* per parameter sharded over the batch dim (FSDP): the value
                                      allgathered over it and the whole gradient (owned when the
                                      copies are kept; else pointers into fv / fg, valid while its
                                      layer runs); NULL for other parameters */
    float *fv, *fg;                /* per-layer scratch of the gathered values and gradients
                                      (reshard_after_forward), or NULL */
    float *wtmp;                   /* block-major scratch for FSDP parameters not split on axis 0 */
    float *gtmp;                   /* per-layer FSDP: a reduced gradient slice that is added to
                                      the shard's (a parameter two layers use: tied_to), or NULL */
    bool wstale;                   /* kept copies: the shards changed since the last allgather */
    mt_layer_state *ls;            /* per layer */
    float *work;                   /* the layers' shared work area (mt_layer_pass.work), or NULL */
    float *x, *g1, *g2;            /* input slice; reshard scratch (max_b * widest) */
    const float *xin;              /* the rows the forward reads: d->x, or the caller's rows */
    int32_t *y;                    /* labels slice (max_b, ydim) */
    float *tg;                     /* float targets slice (max_b, out_size), or NULL */
    bool has_tg;                   /* the current job's rows came with targets (else labels) */
    float *logits, *dlogits, *dlog_loc; /* (max_b, K) */
    mt_coll_bucket *bucket;             /* every trainable gradient + msum, reduced over batch */
    mt_coll_bucket *vbucket;    /* s->zero_ok: every trainable value + msum, in the bucket's order
                                   (the allgather after the sharded update), else NULL */
    mt_coll_bucket *sbucket[2]; /* s->zero_ok: every trainable parameter's slot k (if it has
                                   one), in the same order (zero_sync), else NULL */
    bool slots_stale;           /* a sharded update ran since the slots were last whole here */
    float spad[MT_LOSS_NSUMS + 1]; /* the slot buckets' tail where the others have msum, so
                                      that all three split into the same chunks (unused) */
    float *garena; /* the gradient arena: every gradient the bucket reduces, then msum, back to
                      back in the bucket's order (its collectives run in place) */
    float *msum;   /* MT_LOSS_NSUMS + 1 in garena: the step's loss and metric sums (core/loss) and
                      the NEXT step's example count (in the bucket: the end-of-data agreement
                      rides on the gradient allreduce) */
    size_t
        next; /* the next step's agreed example count (msum[MT_LOSS_NSUMS] after the allreduce) */
    size_t batch, row0;         /* local examples of the current job, first global row */
    size_t gcount;              /* examples of the current step over all replicas */
    int64_t t;                  /* optimizer iterations */
    float *gbuf;                /* checkpoint gather: every member's shard, or NULL */
    float flag;                 /* flag agreement: sum over the world */
    double sums[MT_LOSS_NSUMS]; /* job outputs: the global loss and metric sums */
    double *hist;               /* evaluation: the global AUC histogram (2·MT_LOSS_AUC_BINS), or
                                   NULL when no metric needs it */
    mt_repro_acc acc_w, acc_b;  /* mesh_invariant: the leaf-tree accumulators (s->inv_leaves) */
    mt_repro_acc acc_h;         /* mesh_invariant: the height leaves' (mt_layer_pass.acc_h) */
    float *inv_scr;             /* mesh_invariant: the layers' scratch (mt_layer_pass.scratch) */
    mt_repro_head tied;         /* mesh_invariant: a tied head's handoff (mt_layer_pass.tied) */
    mt_code rc;
    mt_err err;
    pthread_t thread;
    bool started;
} dev;

typedef enum job_kind {
    JOB_NONE,
    JOB_STEP,
    JOB_EVAL,
    JOB_GATHER,
    JOB_AGREE,
    JOB_SLOTS,
    JOB_DIGEST,
    JOB_QUIT
} job_kind;

struct mt_spmd {
    const mt_mesh *mesh;
    int ndev, ndims, bdim, fdim0; /* devices, mesh dims, batch dim, input feature dim */
    int sdim;     /* sequence parallelism: the dim splitting the positions (the token ids' axis 1 of
                     an embedding model's input_layout: fdim0), or -1 */
    int tdim;     /* Megatron-SP: the tensor-parallel dim also splitting the rows outside its
                     blocks (msp_dim), or -1 */
    bool msp_out; /* the model's output rows are split over tdim too */
    int hdim0;    /* the dim sharding an image input's height (bands), or -1 */
    int nlocal, first_local; /* devices of this process (threads), the lowest position */
    int dimsz[MT_MESH_MAX_DIMS];
    mt_coll_world *world, *own_world;
    mt_optimizer_spec opt;
    uint64_t seed;
    int n_layers;
    mt_layer *layers;
    size_t n_params;
    mt_model_param *gparams; /* global descriptors (no buffers) */
    mt_layout *playout;      /* effective layout per parameter (how it is stored) */
    mt_layout *ulayout;      /* layout as used by the math: playout without the batch dim */
    int *fsdp;               /* per parameter: the axis sharded over the batch dim, or -1 */
    bool fsdp_transient;     /* gather FSDP weights per layer, reduce-scatter their gradients */
    int in_rank;
    size_t in_shape[3], in_size, in_c, in_rows, num_classes, max_gb, max_b, widest;
    mt_loss_spec loss;        /* the spec's loss and metrics (core/loss) */
    mt_loss_shape osh;        /* the output's (rows, c) view; num_classes == osh.c */
    size_t out_size;          /* rows · c floats of output per example */
    mt_loss_shape osh_loc;    /* the output view of a device's rows (osh unless sdim >= 0) */
    size_t out_loc, ydim_loc; /* floats of output and labels per example on a device */
    size_t ydim;              /* class labels per example the loss reads (rows; rows · c for binary
                                 cross-entropy on 0/1 labels) */
    bool input_read_only;     /* every reader of the input only reads it: rows are used in place */
    bool zero_ok;             /* the replicas can shard the optimizer update (zero_applies) */
    bool zero;        /* they do (zero_ok, unless mt_spmd_set_sharded_update turned it off) */
    int inv_leaves;   /* mesh_invariant: leaves per device (0: fixed_mesh) */
    size_t inv_r;     /* mesh_invariant: examples per leaf */
    size_t inv_batch; /* mesh_invariant: the spec's global batch (leaf boundaries) */
    dev *devs;
    /* job hand-off (see run_job): one local device runs on the host thread; several have a
     * thread each that spins briefly on gen, then sleeps on cv_job */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    bool sync_init;
    _Atomic uint64_t gen;
    _Atomic uint64_t done; /* device threads finished with the current job */
    uint64_t nthreads;     /* device threads: nlocal, or 0 when the host runs the only one */
    int spin_budget;       /* the host's spin budget (spin_while) */
    job_kind job;
    const float *jx;
    const int32_t *jy;
    const float *jt; /* float targets of the job (n, out_size), or NULL */
    size_t jn;
    uint64_t jstep, jfirst;
    bool jtrain;
    const mt_spmd_piece *jpieces; /* pieces step: per batch coordinate; NULL = slice jx */
    const size_t *jnext;          /* pieces step: next step's count per batch coordinate, or NULL */
    bool jahead;                  /* pieces step: the count is known (ahead_count), no allreduce */
    size_t ahead_count;           /* agreed example count of step ahead_step (valid: ahead) */
    uint64_t ahead_step;
    bool ahead;
    size_t *ahead_mine; /* per batch coordinate: the count this process announced for ahead_step */
    int *all_pos;       /* 0 .. ndev-1: the group of every rank (agreements, shared digests) */
    /* checkpoint gather and flag agreement (mt_spmd_save_gathered, mt_spmd_flag_any) */
    size_t jgi;                    /* parameter */
    int jgk;                       /* -1 value, 0/1 optimizer slot */
    const int *jgroup;             /* the gather group (positions) */
    int jgn;                       /* its size */
    float jflag;                   /* this process's flag */
    mt_coll_call jcall;            /* the collective's tag */
    uint64_t nsaves, nagree;       /* collective saves and agreements made (tags) */
    uint64_t nsyncs;               /* zero_sync's slot allgathers made (tags) */
    const struct digest_plan *jdg; /* shared digest: its tensors and leaves (digest_shared) */
    uint64_t ndigests;             /* shared digests made (tags) */
    uint64_t nevals;            /* evaluations made (tags): the same count in every process, unlike
                                   gen, which a process without device threads never advances */
    char *meta_key, *meta_text; /* owned; text metadata every checkpoint carries, or NULL */
};

/* ------------------------------------------------------------------ config */

/* checkpoint.<key>: an integer in 1..max when present (else *out is kept). */
static mt_code ckpt_field(const cJSON *ck, const char *key, double max, int64_t *out, mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(ck, key);
    if (n == NULL)
        return MT_OK;
    if (!cJSON_IsNumber(n) || n->valuedouble < 1 || n->valuedouble > max ||
        n->valuedouble != (double)(int64_t)n->valuedouble)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint.%s: must be a positive integer",
                          key);
    *out = (int64_t)n->valuedouble;
    return MT_OK;
}

mt_code mt_spmd_config_parse(const char *json, size_t len, mt_spmd_config *cfg, mt_err *err)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    mt_code rc;

    memset(cfg, 0, sizeof(*cfg));
    if (root == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "job spec: not valid JSON");
    rc = mt_spmd_config_from_json(root, cfg, err);
    cJSON_Delete(root);
    return rc;
}

mt_code mt_spmd_config_from_json(const cJSON *root, mt_spmd_config *cfg, mt_err *err)
{
    const cJSON *n, *ck;
    mt_code rc = MT_OK;

    memset(cfg, 0, sizeof(*cfg));
    cfg->ckpt_keep = 3;
    n = cJSON_GetObjectItemCaseSensitive(root, "mesh");
    if (n != NULL && !cJSON_IsNull(n)) {
        if (cJSON_IsString(n))
            rc = mt_mesh_parse(n->valuestring, NULL, 0, &cfg->mesh, err);
        else
            rc = mt_mesh_from_json(n, "mesh", NULL, 0, &cfg->mesh, err);
        if (rc != MT_OK)
            goto done;
    }
    rc = mt_layout_map_from_json(root, &cfg->layouts, err);
    if (rc != MT_OK)
        goto done;
    ck = cJSON_GetObjectItemCaseSensitive(root, "checkpoint");
    if (ck != NULL) {
        if (!cJSON_IsObject(ck)) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint: must be an object");
            goto done;
        }
        for (const cJSON *c = ck->child; c != NULL; c = c->next)
            if (strcmp(c->string, "every_steps") != 0 && strcmp(c->string, "keep") != 0) {
                static const char *const known[] = {"every_steps", "keep"};
                const char *near = mt_status_suggest(c->string, known, 2);
                rc = mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint.%s: unknown field%s%s%s",
                                c->string, near ? "; did you mean " : "", near ? near : "",
                                near ? "?" : "");
                goto done;
            }
        int64_t keep = cfg->ckpt_keep;
        rc = ckpt_field(ck, "every_steps", 1e15, &cfg->ckpt_every, err);
        if (rc == MT_OK)
            rc = ckpt_field(ck, "keep", 1e6, &keep, err);
        if (rc != MT_OK)
            goto done;
        cfg->ckpt_keep = (int)keep;
    }
done:
    if (rc != MT_OK)
        mt_spmd_config_fini(cfg);
    return rc;
}

void mt_spmd_config_fini(mt_spmd_config *cfg)
{
    mt_mesh_free(cfg->mesh);
    mt_layout_map_free(cfg->layouts);
    memset(cfg, 0, sizeof(*cfg));
}

/* ------------------------------------------------------------------ planning */

static size_t dsz(const mt_spmd *s, int d)
{
    return d < 0 ? 1 : (size_t)s->dimsz[d];
}

static int dim_of(const mt_spmd *s, const mt_layout *l, int axis)
{
    if (mt_layout_axis_unsharded(l, axis))
        return -1;
    return mt_mesh_dim_index(s->mesh, l->axes[axis]);
}

static void layout_set(mt_layout *l, int rank, const mt_spmd *s, int last_dim)
{
    mt_layout_init_replicated(l, rank, NULL);
    if (last_dim >= 0)
        snprintf(l->axes[rank - 1], MT_MESH_NAME_MAX, "%s", mt_mesh_dim_name(s->mesh, last_dim));
}

/* The layout the map gives param i, checked against a derived one when `derived` is set. */
static mt_code resolve_param(mt_spmd *s, const mt_layout_map *map, size_t i,
                             const mt_layout *derived, mt_err *err)
{
    mt_model_param *p = &s->gparams[i];
    mt_layout l, use;
    int entry = -1, fa = -1;
    int64_t shape[4];
    char path[256];
    mt_code rc = mt_layout_map_resolve(map, p->name, p->rank, &l, &entry, err);
    if (rc != MT_OK)
        return rc;
    if (entry >= 0)
        mt_layout_map_path(map, entry, path, sizeof(path));
    else
        snprintf(path, sizeof(path), "param %s", p->name);
    use = l; /* an axis over the batch dim is FSDP: stored sharded, allgathered for the math */
    for (int a = 0; a < l.rank && s->bdim >= 0; a++)
        if (dim_of(s, &l, a) == s->bdim) {
            fa = a;
            snprintf(use.axes[a], MT_MESH_NAME_MAX, "unsharded");
        }
    if (derived != NULL) {
        if (entry >= 0 && !mt_layout_equal(&use, derived)) {
            char want[96];
            mt_layout_format(derived, want, sizeof(want));
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: %s must follow its layer's feature sharding %s", path, p->name,
                              want);
        }
        use = *derived;
        l = *derived;
        if (fa >= 0)
            snprintf(l.axes[fa], MT_MESH_NAME_MAX, "%s", mt_mesh_dim_name(s->mesh, s->bdim));
    }
    for (int a = 0; a < p->rank; a++)
        shape[a] = (int64_t)p->shape[a];
    rc = mt_layout_validate(&l, s->mesh, p->name, shape, p->rank, path, err);
    if (rc != MT_OK)
        return rc;
    s->playout[i] = l;
    s->ulayout[i] = use;
    s->fsdp[i] = fa;
    return MT_OK;
}

/* The planner of mt_layer_plan: declares global parameters and resolves their layouts. */
typedef struct planner_ctx {
    mt_spmd *s;
    const mt_layout_map *map;
} planner_ctx;

static mt_code plan_add_param(void *ctx, mt_layer *l, int slot, const char *what, int rank,
                              const size_t *shape, mt_param_init init, bool trainable, int follow,
                              mt_err *err)
{
    planner_ctx *pc = ctx;
    mt_spmd *s = pc->s;
    mt_model_param *p = &s->gparams[s->n_params];
    mt_layout fl;

    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s.%s", l->s.name, what);
    p->rank = rank;
    p->size = 1;
    for (int i = 0; i < rank; i++) {
        p->shape[i] = p->local_shape[i] = shape[i];
        p->size *= shape[i];
    }
    p->init = init;
    p->trainable = trainable;
    l->pi[slot] = s->n_params++;
    l->has[slot] = true;
    if (follow != MT_LAYER_FROM_MAP)
        layout_set(&fl, rank, s, follow);
    return resolve_param(s, pc->map, l->pi[slot], follow != MT_LAYER_FROM_MAP ? &fl : NULL, err);
}

static int plan_param_dim(void *ctx, const mt_layer *l, int slot, int axis)
{
    const planner_ctx *pc = ctx;
    return dim_of(pc->s, &pc->s->ulayout[l->pi[slot]], axis);
}

static const char *plan_dim_name(void *ctx, int dim)
{
    const planner_ctx *pc = ctx;
    return mt_mesh_dim_name(pc->s->mesh, dim);
}

static size_t plan_dim_size(void *ctx, int dim)
{
    const planner_ctx *pc = ctx;
    return dsz(pc->s, dim);
}

/* Global parameter shapes as int64 for mt_layout_map_check. */
static mt_code check_map(mt_spmd *s, const mt_layout_map *map, size_t gb, mt_err *err)
{
    mt_layout_param *lp = mt_calloc(s->n_params + 1, sizeof(*lp));
    int64_t *shapes = mt_calloc(s->n_params * 4 + 1, sizeof(int64_t));
    int64_t ishape[4] = {(int64_t)gb, 0, 0, 0};
    int irank = s->in_rank + 1;
    mt_code rc;

    if (lp == NULL || shapes == NULL) {
        mt_free(lp);
        mt_free(shapes);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "layouts: out of memory");
    }
    for (size_t i = 0; i < s->n_params; i++) {
        for (int a = 0; a < s->gparams[i].rank; a++)
            shapes[i * 4 + (size_t)a] = (int64_t)s->gparams[i].shape[a];
        lp[i].name = s->gparams[i].name;
        lp[i].shape = &shapes[i * 4];
        lp[i].rank = s->gparams[i].rank;
    }
    for (int a = 0; a < s->in_rank; a++)
        ishape[a + 1] = (int64_t)s->in_shape[a];
    if (mt_layout_map_input(map) != NULL && mt_layout_map_input(map)->rank == 2) {
        ishape[1] = (int64_t)s->in_size; /* an image's layout as [batch, features] */
        irank = 2;
    }
    rc = mt_layout_map_check(map, s->mesh, lp, (int)s->n_params, ishape, irank, err);
    mt_free(lp);
    mt_free(shapes);
    return rc;
}

/* The kernel axis of a dense or conv2d layer's contraction (a = 0: kin) or output (a = 1: kout):
 * conv2d's input channels and filters are axes 2 and 3; a tied head's kernel is the table, whose
 * vocabulary (the output) is axis 0. */
static int kernel_axis(const mt_layer *l, int a)
{
    if (l->ops->kind == MT_LAYER_CONV2D)
        return 2 + a;
    return l->s.tied ? 1 - a : a;
}

/*
 * mesh_invariant with the positions split over sdim (docs/reproducibility.md, "Position leaves"):
 * the seq size must keep the bits for the sequence's position leaves (mt_repro_check_seq:
 * INVALID_ARGUMENT naming the sizes that do), and every layer must run its sums over positions on
 * position leaves (mt_layer_ops.seq_leaves; UNIMPLEMENTED naming the first that does not).
 */
static mt_code check_inv_seq(const mt_spmd *s, mt_err *err)
{
    const char *name = s->sdim >= 0 ? mt_mesh_dim_name(s->mesh, s->sdim) : "";
    mt_code rc;

    if (s->sdim < 0 || dsz(s, s->sdim) == 1)
        return MT_OK;
    if ((rc = mt_repro_check_seq(s->in_shape[0], name, (int)dsz(s, s->sdim), err)) != MT_OK)
        return rc;
    for (int i = 0; i < s->n_layers; i++)
        if (!s->layers[i].ops->seq_leaves)
            return mt_err_set(err, MT_UNIMPLEMENTED,
                              "model.layers[%d] (%s): reproducibility: \"mesh_invariant\" does "
                              "not run a%s %s layer on positions split over '%s' yet (sequence "
                              "parallelism: its gradients' sums over the positions have no "
                              "position leaves)",
                              i, s->layers[i].s.name,
                              strchr("aeiou", s->layers[i].ops->type[0]) != NULL ? "n" : "",
                              s->layers[i].ops->type, name);
    return MT_OK;
}

/*
 * mesh_invariant (docs/reproducibility.md): a dense or conv2d kernel axis (conv2d: its input
 * channels or filters) split over a mesh dimension keeps the bits when the dimension's size is a
 * power of two dividing the axis' K-leaves (its output columns are computed each by itself; a
 * split contraction or a split output's input gradient sums chains combined by the canonical
 * tree, whose top is that dimension's allreduce); so does a layer_norm's features split (its
 * per-row sums in K-leaves); the positions split over sdim: check_inv_seq.
 */
static mt_code check_inv_splits(const mt_spmd *s, mt_err *err)
{
    mt_code src = check_inv_seq(s, err);
    if (src != MT_OK)
        return src;
    for (int i = 0; i < s->n_layers; i++) {
        const mt_layer *l = &s->layers[i];
        const bool conv = l->ops->kind == MT_LAYER_CONV2D;
        const int dims[2] = {l->kin, l->kout};
        const int axes[2] = {kernel_axis(l, 0), kernel_axis(l, 1)};
        const size_t width[2] = {l->in_c, conv ? l->s.filters : l->s.units};
        if (l->ops->kind == MT_LAYER_LAYER_NORM && l->xf >= 0 &&
            !mt_repro_keeps_bits(l->in_c, (int)dsz(s, l->xf)))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d] (%s): reproducibility: \"mesh_invariant\" needs "
                              "mesh dimension '%s' (size %zu), which splits its %zu features, to "
                              "be a power of two dividing their %d leaves",
                              i, l->s.name, mt_mesh_dim_name(s->mesh, l->xf), dsz(s, l->xf),
                              l->in_c, mt_repro_leaves(l->in_c));
        for (int a = 0; (l->ops->kind == MT_LAYER_DENSE || conv) && a < 2; a++) {
            mt_code rc;
            if (dims[a] < 0 || dsz(s, dims[a]) == 1)
                continue;
            rc =
                mt_repro_check_split(i, l->s.name, axes[a], width[a],
                                     mt_mesh_dim_name(s->mesh, dims[a]), (int)dsz(s, dims[a]), err);
            if (rc != MT_OK)
                return rc;
        }
    }
    return MT_OK;
}

/*
 * mesh_invariant on height bands (docs/reproducibility.md, "Height leaves"): a layer summing over
 * an image's rows (conv2d's and dense's weight gradients over their output rows, batch_norm's,
 * layer_norm's and global_average_pooling2d's sums over their input rows) keeps the bits when the
 * band count is a power of two dividing the rows' height leaves (INVALID_ARGUMENT naming the sizes
 * that do). Pooling windows overlapping in height keep them as they are (each pixel's gradient
 * summed in the whole image's window order from a halo of dy, max_pool2d.c), and so does a
 * conv2d's channel split on bands (check_inv_splits checks its size as without bands).
 */
static mt_code check_inv_bands(const mt_spmd *s, mt_err *err)
{
    for (int i = 0; i < s->n_layers && s->hdim0 >= 0; i++) {
        const mt_layer *l = &s->layers[i];
        mt_layer_kind kd = l->ops->kind;
        int p = (int)dsz(s, l->hx);
        const char *dim = l->hx >= 0 ? mt_mesh_dim_name(s->mesh, l->hx) : "";
        mt_code rc = MT_OK;
        if (l->hx < 0)
            continue;
        if (kd == MT_LAYER_CONV2D || kd == MT_LAYER_DENSE)
            rc = mt_repro_check_bands(i, l->s.name, l->out_shape[0], dim, p, err);
        else if (kd == MT_LAYER_BATCH_NORM || kd == MT_LAYER_LAYER_NORM ||
                 kd == MT_LAYER_GLOBAL_AVERAGE_POOLING2D)
            rc = mt_repro_check_bands(i, l->s.name, l->in_shape[0], dim, p, err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

/* Sequence parallelism: what the layers cannot check themselves (the loss) and the output's
 * per-device view. */
static mt_code plan_seq(mt_spmd *s, mt_err *err)
{
    size_t n = dsz(s, s->sdim);
    const char *name = mt_mesh_dim_name(s->mesh, s->sdim);

    if (s->loss.kind != MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "loss: the positions are split over '%s' (input_layout[1]); that needs "
                          "a label per position (sparse_categorical_crossentropy)",
                          name);
    s->msp_out = s->tdim >= 0 && s->layers[s->n_layers - 1].rout == s->tdim;
    if (s->msp_out)
        n *= dsz(s, s->tdim);
    s->osh_loc.rows = s->osh.rows / n;
    s->out_loc = s->out_size / n;
    s->ydim_loc = s->ydim / n;
    return MT_OK;
}

/*
 * An image input layout [batch, H, unsharded, unsharded] may shard the height H over a mesh dim
 * (bands, docs/spmd.md): s->hdim0. Axis a of the layout is the input's axis a - 1.
 */
static mt_code plan_input_bands(mt_spmd *s, const mt_layout *il, mt_err *err)
{
    size_t n;
    for (int a = 2; a < il->rank; a++)
        if (!mt_layout_axis_unsharded(il, a))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "input_layout[%d]: image inputs may be sharded on the batch and the "
                              "height (axis 1) only",
                              a);
    s->hdim0 = dim_of(s, il, 1);
    n = dsz(s, s->hdim0);
    if (s->hdim0 >= 0 && s->hdim0 == dim_of(s, il, 0))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "input_layout[1]: mesh dimension '%s' is already used by axis 0",
                          mt_mesh_dim_name(s->mesh, s->hdim0));
    if (s->hdim0 >= 0 && s->in_shape[0] % n != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "input_layout[1]: the input's height %zu is not divisible by mesh "
                          "dimension '%s' of size %zu",
                          s->in_shape[0], mt_mesh_dim_name(s->mesh, s->hdim0), n);
    return MT_OK;
}

/* A model on height bands must make them whole before its output (flatten, global pooling). */
static mt_code check_bands(const mt_spmd *s, mt_err *err)
{
    const mt_layer *last = &s->layers[s->n_layers - 1];
    if (s->hdim0 < 0)
        return MT_OK;
    if (last->ho >= 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): the model's output is still sharded on its "
                          "height over '%s'; end with a flatten or global_average_pooling2d "
                          "before the head",
                          last->idx, last->s.name, mt_mesh_dim_name(s->mesh, last->ho));
    return MT_OK;
}

/* Plan (again) every layer of spec with pl into fresh arrays. */
static mt_code plan_layers(mt_spmd *s, const mt_job_spec *spec, const mt_layer_planner *pl,
                           mt_err *err)
{
    size_t np = (size_t)spec->n_layers * MT_LAYER_MAX_PARAMS + 1;

    mt_free(s->layers);
    mt_free(s->gparams);
    mt_free(s->playout);
    mt_free(s->ulayout);
    mt_free(s->fsdp);
    s->n_params = 0;
    s->n_layers = spec->n_layers;
    s->layers = mt_calloc((size_t)spec->n_layers + 1, sizeof(mt_layer));
    s->gparams = mt_calloc(np, sizeof(mt_model_param));
    s->playout = mt_calloc(np, sizeof(mt_layout));
    s->ulayout = mt_calloc(np, sizeof(mt_layout));
    s->fsdp = mt_calloc(np, sizeof(int));
    if (s->layers == NULL || s->gparams == NULL || s->playout == NULL || s->ulayout == NULL ||
        s->fsdp == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "spmd plan: out of memory");
    s->widest = s->in_size;
    for (int i = 0; i < spec->n_layers; i++) {
        mt_layer *l = &s->layers[i];
        mt_code rc = mt_layer_plan(spec, i, s->layers, s->in_rank, s->in_shape, s->fdim0, s->hdim0,
                                   pl, l, err);
        if (rc != MT_OK)
            return rc;
        if (l->out_size > s->widest)
            s->widest = l->out_size;
        if (l->hx >= 0 && 2 * l->in_size > s->widest) /* a halo's allgather: p (top + bot)
                                                           rows of at most 2 bands each */
            s->widest = 2 * l->in_size;
    }
    return MT_OK;
}

/*
 * Megatron-SP (docs/transformers.md): with the positions split over sdim, the dim of the
 * tensor-parallel blocks — the one sharding a dense kernel's contraction axis (the attention
 * projection, the second MLP matrix) — also splits the rows outside them. -1 if none, and always
 * under mesh_invariant: there the two dims are planned independently, so no layer's rows are
 * split over the model dim (a tied head's rows are the embedding's: its per-leaf handoff holds).
 */
static int msp_dim(const mt_spmd *s, const mt_job_spec *spec)
{
    if (s->sdim < 0 || spec->reproducibility != MT_REPRO_FIXED_MESH)
        return -1;
    for (int i = 0; i < s->n_layers; i++) {
        const mt_layer *l = &s->layers[i];
        if (l->s.kind == MT_LAYER_DENSE && l->kin >= 0 && l->kin != s->sdim && l->kin != s->bdim &&
            dsz(s, l->kin) > 1)
            return l->kin;
    }
    return -1;
}

/*
 * Whether the data-parallel replicas shard the optimizer update (ZeRO-1, dev_update_sharded):
 * several replicas, a gradient bucket reduced over the batch dim alone (no sequence dim), no
 * FSDP parameter, and no global-norm clipping (its norm would need every gradient: the replicated
 * update keeps that sum's order). Replicas in other processes share it too: every checkpoint
 * of such a world is then gathered (mt_spmd_save_needs_gather) and every digest collective, since
 * each process holds only its chunk of the slots current. Every optimizer is elementwise, so
 * updating a slice of the fused gradients gives each element the bits the whole update gives it.
 */
static bool zero_applies(const mt_spmd *s)
{
    if (s->bdim < 0 || s->dimsz[s->bdim] < 2 || s->sdim >= 0 || s->opt.global_clipnorm > 0.0f)
        return false;
    for (size_t i = 0; i < s->n_params; i++)
        if (s->fsdp[i] >= 0)
            return false;
    return true;
}

/* Whether every reader of src's output (MT_LAYER_INPUT: the model's input rows) only reads it; a
 * reader whose output may be a view of it (flatten, dropout) passes the question on to its own
 * readers. */
static bool only_read(const mt_spmd *s, int src)
{
    for (int i = src + 1; i < s->n_layers; i++) {
        const mt_layer *l = &s->layers[i];
        for (int j = 0; j < l->s.n_inputs; j++)
            if (l->s.inputs[j] == src && !l->ops->reads_input_only &&
                !(l->ops->views_input && only_read(s, i)))
                return false;
    }
    return true;
}

static mt_code plan(mt_spmd *s, const mt_job_spec *spec, const mt_layout_map *map, mt_err *err)
{
    const mt_layout *il = mt_layout_map_input(map);
    const mt_layer *last;
    planner_ctx pc = {s, map};
    mt_layer_planner pl = {.ctx = &pc,
                           .add_param = plan_add_param,
                           .param_dim = plan_param_dim,
                           .dim_name = plan_dim_name,
                           .dim_size = plan_dim_size};
    mt_code rc;

    s->bdim = -1;
    s->fdim0 = -1;
    s->hdim0 = -1;
    if (il != NULL) {
        if (il->rank == 2 && s->in_rank > 1) { /* [batch, features] of a flattened image */
            if (!mt_layout_axis_unsharded(il, 1))
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "input_layout[1]: image inputs may be sharded on the batch "
                                  "axis only");
            s->bdim = dim_of(s, il, 0);
        } else if (il->rank != s->in_rank + 1)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "input_layout: rank %d but the input is (batch + %d axes)", il->rank,
                              s->in_rank);
        s->bdim = dim_of(s, il, 0);
        if (s->in_rank == 1)
            s->fdim0 = dim_of(s, il, 1);
        if (s->in_rank == 3 && il->rank == 4 && (rc = plan_input_bands(s, il, err)) != MT_OK)
            return rc;
        for (int a = 1; a < il->rank && s->in_rank == 2; a++)
            if (!mt_layout_axis_unsharded(il, a))
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "input_layout[%d]: inputs of rank 2 may be sharded on the "
                                  "batch axis only",
                                  a);
    } else {
        s->bdim = mt_mesh_dim_index(s->mesh, "batch");
    }
    s->sdim = -1;
    if (s->in_rank == 1 && s->fdim0 >= 0 && spec->layers[0].kind == MT_LAYER_EMBEDDING &&
        spec->layers[0].inputs[0] == MT_LAYER_INPUT) { /* token ids sharded by position */
        s->sdim = s->fdim0;
        if (s->in_shape[0] % dsz(s, s->sdim) != 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "dataset.block_size: %zu positions are not divisible by the %zu "
                              "devices of '%s' (input_layout[1] splits the positions)",
                              s->in_shape[0], dsz(s, s->sdim), mt_mesh_dim_name(s->mesh, s->sdim));
    }
    pl.sdim = s->sdim;
    pl.tdim = -1;
    rc = plan_layers(s, spec, &pl, err);
    if (rc == MT_OK && (pl.tdim = msp_dim(s, spec)) >= 0 &&
        plan_layers(s, spec, &pl, NULL) != MT_OK) { /* a model Megatron-SP does not cover */
        pl.tdim = -1;
        rc = plan_layers(s, spec, &pl, err);
    }
    s->tdim = pl.tdim;
    if (rc != MT_OK)
        return rc;
    if ((rc = check_bands(s, err)) != MT_OK)
        return rc;
    last = &s->layers[spec->n_layers - 1];
    mt_model_output_view(last->out_rank, last->out_shape, &s->osh);
    s->loss = spec->loss;
    s->num_classes = s->osh.c;
    s->out_size = s->osh.rows * s->osh.c;
    s->ydim = mt_loss_units(&s->loss, &s->osh);
    s->osh_loc = s->osh;
    s->out_loc = s->out_size;
    s->ydim_loc = s->ydim;
    if (s->sdim >= 0 && (rc = plan_seq(s, err)) != MT_OK)
        return rc;
    if (spec->reproducibility == MT_REPRO_MESH_INVARIANT) {
        int p = (int)dsz(s, s->bdim);
        if (!mt_repro_keeps_bits(spec->batch_size, p))
            return mt_repro_check_mesh(spec->batch_size, p, err);
        s->inv_batch = spec->batch_size;
        s->inv_leaves = mt_repro_leaves(spec->batch_size) / p;
        s->inv_r = spec->batch_size / (size_t)mt_repro_leaves(spec->batch_size);
        if ((rc = check_inv_splits(s, err)) != MT_OK || (rc = check_inv_bands(s, err)) != MT_OK)
            return rc;
    }
    /* dense, conv2d and the joins write their own buffers; a band is copied out of the whole
     * rows */
    s->input_read_only = s->hdim0 < 0 && only_read(s, MT_LAYER_INPUT);
    s->zero_ok = s->zero = zero_applies(s);
    return check_map(s, map, spec->batch_size, err);
}

/* ------------------------------------------------------------------ collectives helpers */

/* The positions' dim over which the gradient bucket and the evaluation sums are summed after the
 * batch's (sequence parallelism under fixed_mesh), or -1: under mesh_invariant the layers and the
 * loss sum over it inside the leaf trees, once per batch leaf (docs/reproducibility.md). */
static int seq_bucket_dim(const mt_spmd *s)
{
    return s->inv_leaves > 0 ? -1 : s->sdim;
}

static mt_code grp_allreduce(dev *d, int dim, float *buf, size_t n)
{
    mt_coll_group g;
    if (dim < 0)
        return MT_OK;
    g.ranks = d->groups[dim];
    g.size = d->s->dimsz[dim];
    mt_coll_comm_axis(d->comm, mt_mesh_dim_name(d->s->mesh, dim));
    return mt_coll_allreduce_sum(d->comm, &g, buf, n, NULL, &d->err);
}

/*
 * Reshard src (rows, c global width; last axis sharded over `from`, -1 = whole) into dst sharded
 * over `to`. from != to. Uses d->g1 / d->g2 as scratch (rows * c floats each).
 */
static mt_code reshard(dev *d, const float *src, size_t rows, size_t c, int from, int to,
                       float *dst)
{
    mt_spmd *s = d->s;
    const float *full = src;
    if (from >= 0) {
        size_t p = dsz(s, from), cl = c / p;
        mt_coll_group g = {d->groups[from], s->dimsz[from]};
        float *out = to < 0 ? dst : d->g2;
        mt_coll_comm_axis(d->comm, mt_mesh_dim_name(s->mesh, from));
        mt_code rc = mt_coll_allgather(d->comm, &g, src, d->g1, rows * cl, NULL, &d->err);
        if (rc != MT_OK)
            return rc;
        for (size_t k = 0; k < p; k++)
            for (size_t r = 0; r < rows; r++)
                memcpy(out + r * c + k * cl, d->g1 + (k * rows + r) * cl, cl * sizeof(float));
        full = out;
        if (to < 0)
            return MT_OK;
    }
    if (to >= 0) {
        size_t cl = c / dsz(s, to), off = (size_t)d->coords[to] * cl;
        for (size_t r = 0; r < rows; r++)
            memcpy(dst + r * cl, full + r * c + off, cl * sizeof(float));
    } else {
        memcpy(dst, full, rows * c * sizeof(float));
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ FSDP */

/*
 * A parameter sharded over the batch dim (FSDP, DTensor's batch-sharded weights) is stored as
 * its shard (d->params[i], with its optimizer slots) and used whole along that axis: viewed as
 * (outer, pb * la, inner) with la the shard's extent on axis fa = s->fsdp[i], member k of the
 * batch group holds rows [k la, (k + 1) la) of the middle axis.
 */
static void fsdp_geom(const mt_model_param *p, int fa, size_t *outer, size_t *la, size_t *inner)
{
    *outer = *inner = 1;
    for (int a = 0; a < fa; a++)
        *outer *= p->local_shape[a];
    for (int a = fa + 1; a < p->rank; a++)
        *inner *= p->local_shape[a];
    *la = p->local_shape[fa];
}

/* Floats of the largest FSDP parameter as used (its allgather scratch). */
static size_t fsdp_widest(const mt_spmd *s)
{
    size_t w = 0;
    for (size_t i = 0; i < s->n_params; i++) {
        size_t n = 1;
        if (s->fsdp[i] < 0)
            continue;
        for (int a = 0; a < s->gparams[i].rank; a++)
            n *= s->gparams[i].shape[a];
        w = n > w ? n : w;
    }
    return w;
}

/* This device's shard of a whole-along-the-batch-axis buffer `use` of parameter i. */
static void fsdp_slice(dev *d, size_t i, const float *use, float *shard)
{
    const mt_model_param *p = &d->params[i];
    size_t outer, la, inner, pb = dsz(d->s, d->s->bdim), k = (size_t)d->coords[d->s->bdim];
    fsdp_geom(p, d->s->fsdp[i], &outer, &la, &inner);
    for (size_t o = 0; o < outer; o++)
        memcpy(shard + o * la * inner, use + (o * pb + k) * la * inner, la * inner * sizeof(float));
}

/* A non-trainable FSDP parameter (moving statistics) updated in its used copy: keep the shard. */
static void fsdp_keep(dev *d, size_t i)
{
    if (d->wval[i] != NULL)
        fsdp_slice(d, i, d->wval[i], d->params[i].value);
}

/* Allgather parameter i's shards over the batch dim into d->wval[i]. */
static mt_code fsdp_gather_one(dev *d, size_t i)
{
    mt_spmd *s = d->s;
    const mt_model_param *p = &d->params[i];
    mt_coll_group g = {d->groups[s->bdim], (int)dsz(s, s->bdim)};
    size_t outer, la, inner, pb = dsz(s, s->bdim);
    float *dst;
    mt_code rc;

    fsdp_geom(p, s->fsdp[i], &outer, &la, &inner);
    dst = outer == 1 ? d->wval[i] : d->wtmp; /* blocks already in place when outer is 1 */
    mt_coll_comm_axis(d->comm, mt_mesh_dim_name(s->mesh, s->bdim));
    rc = mt_coll_allgather(d->comm, &g, p->value, dst, p->size, NULL, &d->err);
    if (rc != MT_OK)
        return rc;
    for (size_t k = 0; dst != d->wval[i] && k < pb; k++)
        for (size_t o = 0; o < outer; o++)
            memcpy(d->wval[i] + (o * pb + k) * la * inner, dst + k * p->size + o * la * inner,
                   la * inner * sizeof(float));
    return MT_OK;
}

/* Kept copies: allgather every FSDP parameter (after an update or a restore). */
static mt_code fsdp_gather(dev *d)
{
    for (size_t i = 0; i < d->s->n_params; i++) {
        mt_code rc = d->wval[i] != NULL ? fsdp_gather_one(d, i) : MT_OK;
        if (rc != MT_OK)
            return rc;
    }
    d->wstale = false;
    return MT_OK;
}

/* Floats of layer l's FSDP parameters as used (its share of the per-layer scratch). */
static size_t fsdp_layer_size(const mt_spmd *s, const mt_layer *l, const dev *d)
{
    size_t n = 0;
    for (int k = 0; k < MT_LAYER_MAX_PARAMS; k++)
        if (l->has[k] && s->fsdp[l->pi[k]] >= 0)
            n += d->params[l->pi[k]].size * dsz(s, s->bdim);
    return n;
}

/* Per-layer mode: gather layer idx's FSDP parameters into d->fv (gradients into d->fg). */
static mt_code fsdp_gather_layer(dev *d, int idx)
{
    mt_spmd *s = d->s;
    const mt_layer *l = &s->layers[idx];
    size_t off = 0;

    for (int k = 0; k < MT_LAYER_MAX_PARAMS && s->fsdp_transient; k++) {
        size_t i = l->pi[k];
        mt_code rc;
        if (!l->has[k] || s->fsdp[i] < 0)
            continue;
        d->wval[i] = d->fv + off;
        d->wgrad[i] = d->params[i].trainable ? d->fg + off : NULL;
        if (l->grads_shared && d->wgrad[i] != NULL) /* the layer adds to it: start from zero */
            memset(d->wgrad[i], 0, d->params[i].size * dsz(s, s->bdim) * sizeof(float));
        off += d->params[i].size * dsz(s, s->bdim);
        if ((rc = fsdp_gather_one(d, i)) != MT_OK)
            return rc;
    }
    return MT_OK;
}

/* mesh_invariant: parameter i of layer l is a tied head's kernel (the embedding's table), whose
 * gradient the head does not write: the embedding's backward builds it whole, both contributions
 * meeting per leaf (mt_repro_tied_grad_h), and reduces it once. */
static bool inv_tied_kernel(const mt_spmd *s, const mt_layer *l, size_t i)
{
    return s->inv_leaves > 0 && l->s.tied && i == s->layers[l->s.tied_to].pi[0];
}

/* Per-layer mode: reduce-scatter layer idx's FSDP gradients over the batch dim into the shards'
 * gradients (the same bits as the allreduce's slice, mt_coll.h). A layer whose parameters a
 * later layer also used (grads_shared: the embedding of a tied head) adds its reduced slice to
 * the one that layer left; under mesh_invariant the head leaves none (inv_tied_kernel): the
 * embedding's gradient holds both parts, reduce-scattered into the shard's once. */
static mt_code fsdp_reduce_layer(dev *d, int idx)
{
    mt_spmd *s = d->s;
    const mt_layer *l = &s->layers[idx];
    mt_coll_group g = {d->groups[s->bdim >= 0 ? s->bdim : 0], (int)dsz(s, s->bdim)};
    const bool add = l->grads_shared && s->inv_leaves == 0;

    for (int k = 0; k < MT_LAYER_MAX_PARAMS && s->fsdp_transient; k++) {
        size_t i = l->pi[k], outer, la, inner, pb = dsz(s, s->bdim);
        mt_model_param *p = &d->params[i];
        const float *src = d->wgrad[i];
        mt_code rc;
        if (!l->has[k] || s->fsdp[i] < 0 || !p->trainable || inv_tied_kernel(s, l, i))
            continue;
        if ((rc = grp_allreduce(d, seq_bucket_dim(s), d->wgrad[i], p->size * pb)) != MT_OK)
            return rc; /* positions split: first the sum over them (the bucket's, kept copies) */
        fsdp_geom(p, s->fsdp[i], &outer, &la, &inner);
        if (outer > 1) { /* member k's chunk must hold its slice: block-major order */
            for (size_t b = 0; b < pb; b++)
                for (size_t o = 0; o < outer; o++)
                    memcpy(d->wtmp + b * p->size + o * la * inner, src + (o * pb + b) * la * inner,
                           la * inner * sizeof(float));
            src = d->wtmp;
        }
        mt_coll_comm_axis(d->comm, mt_mesh_dim_name(s->mesh, s->bdim));
        rc = mt_coll_reduce_scatter(d->comm, &g, src, add ? d->gtmp : p->grad, p->size * pb, NULL,
                                    &d->err);
        if (rc != MT_OK)
            return rc;
        for (size_t e = 0; add && e < p->size; e++)
            p->grad[e] += d->gtmp[e];
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ device: layer services */

static mt_code svc_allreduce(void *ctx, int dim, float *buf, size_t n)
{
    return grp_allreduce(ctx, dim, buf, n);
}

static mt_code svc_reshard(void *ctx, const float *src, size_t rows, size_t c, int from, int to,
                           float *dst)
{
    return reshard(ctx, src, rows, c, from, to, dst);
}

static mt_code svc_allgather(void *ctx, int dim, const float *src, size_t n, float *dst)
{
    dev *d = ctx;
    mt_coll_group g = {d->groups[dim], d->s->dimsz[dim]};
    mt_coll_comm_axis(d->comm, mt_mesh_dim_name(d->s->mesh, dim));
    return mt_coll_allgather(d->comm, &g, src, dst, n, NULL, &d->err);
}

static mt_code svc_reduce_scatter(void *ctx, int dim, const float *src, size_t n, float *dst)
{
    dev *d = ctx;
    mt_coll_group g = {d->groups[dim], d->s->dimsz[dim]};
    mt_coll_comm_axis(d->comm, mt_mesh_dim_name(d->s->mesh, dim));
    return mt_coll_reduce_scatter(d->comm, &g, src, dst, n, NULL, &d->err);
}

static size_t svc_dim_size(void *ctx, int dim)
{
    const dev *d = ctx;
    return dsz(d->s, dim);
}

static int svc_coord(void *ctx, int dim)
{
    const dev *d = ctx;
    return dim < 0 ? 0 : d->coords[dim];
}

static void svc_keep(void *ctx, size_t i)
{
    fsdp_keep(ctx, i);
}

/* Gather layer idx's FSDP weights (per-layer mode) and bind what its math uses: the
 * allgathered copy for an FSDP parameter, else the local shard. */
static mt_code svc_bind(void *ctx, int idx)
{
    dev *d = ctx;
    const mt_layer *l = &d->s->layers[idx];
    mt_layer_state *st = &d->ls[idx];
    mt_code rc = fsdp_gather_layer(d, idx);
    for (int k = 0; k < MT_LAYER_MAX_PARAMS; k++) {
        size_t i = l->pi[k];
        st->pv[k] = !l->has[k] ? NULL : d->wval[i] != NULL ? d->wval[i] : d->params[i].value;
        st->pg[k] = !l->has[k] ? NULL : d->wgrad[i] != NULL ? d->wgrad[i] : d->params[i].grad;
    }
    return rc;
}

static mt_code svc_after_backward(void *ctx, int idx)
{
    return fsdp_reduce_layer(ctx, idx);
}

static mt_layer_dev dev_services(dev *d)
{
    mt_layer_dev ld = {d,          svc_allreduce, svc_reshard,   svc_dim_size,
                       svc_coord,  svc_keep,      svc_bind,      svc_after_backward,
                       d->s->bdim, d->s->seed,    svc_allgather, svc_reduce_scatter};
    return ld;
}

/* ------------------------------------------------------------------ device: allocation */

/* The sharded update's value bucket: every trainable value and msum, as d->bucket registers
 * their gradients (zero_applies: no FSDP parameter). */
static mt_code zero_bucket(dev *d, mt_err *err)
{
    mt_code rc = mt_coll_bucket_new(&d->vbucket, err);
    for (size_t i = 0; rc == MT_OK && i < d->s->n_params; i++)
        if (d->params[i].trainable)
            rc = mt_coll_bucket_add(d->vbucket, d->params[i].value, d->params[i].size, err);
    if (rc == MT_OK)
        rc = mt_coll_bucket_add(d->vbucket, d->msum, MT_LOSS_NSUMS + 1, err);
    for (int k = 0; rc == MT_OK && k < mt_optim_slots(&d->s->opt); k++) {
        rc = mt_coll_bucket_new(&d->sbucket[k], err);
        for (size_t i = 0; rc == MT_OK && i < d->s->n_params; i++)
            if (d->params[i].trainable)
                rc = mt_coll_bucket_add(d->sbucket[k],
                                        k == 0 ? d->params[i].slot1 : d->params[i].slot2,
                                        d->params[i].size, err);
        if (rc == MT_OK)
            rc = mt_coll_bucket_add(d->sbucket[k], d->spad, MT_LOSS_NSUMS + 1, err);
    }
    return rc;
}

/* Parameter i's gradient rides in the gradient bucket (and lies in the gradient arena): every
 * trainable one but the per-layer FSDP gradients, reduce-scattered in the backward. */
static bool grad_in_bucket(const mt_spmd *s, const dev *d, size_t i)
{
    return d->params[i].trainable && !(s->fsdp[i] >= 0 && s->fsdp_transient);
}

/* Floats of parameter i's gradient in the bucket: a kept FSDP copy's whole gradient (sliced after
 * the reduction), else the shard's. */
static size_t bucket_grad_size(const mt_spmd *s, const dev *d, size_t i)
{
    return d->params[i].size * (s->fsdp[i] >= 0 ? dsz(s, s->bdim) : 1);
}

static mt_code dev_alloc(dev *d, mt_err *err)
{
    mt_spmd *s = d->s;
    size_t b = s->max_b;
    int slots = mt_optim_slots(&s->opt);
    mt_code rc;

#define DALLOC(ptr, n)                                                                             \
    do {                                                                                           \
        (ptr) = mt_calloc((n) + 1, sizeof(*(ptr)));                                                \
        if ((ptr) == NULL)                                                                         \
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "device %d: out of memory", d->pos);     \
    } while (0)

    if (d->comm == NULL)
        return MT_OK; /* another process's device: nothing here */
    rc = mt_mesh_coords(s->mesh, mt_mesh_device_at(s->mesh, d->pos), d->coords, err);
    if (rc != MT_OK)
        return rc;
    for (int k = 0; k < s->ndims; k++) {
        int n = 0, *ids;
        DALLOC(d->groups[k], (size_t)s->ndev);
        ids = d->groups[k];
        rc = mt_mesh_group_idx(s->mesh, mt_mesh_device_at(s->mesh, d->pos), &k, 1, ids, &n, NULL,
                               err);
        if (rc != MT_OK)
            return rc;
        for (int j = 0; j < n; j++)
            ids[j] = mt_mesh_position(s->mesh, ids[j]);
    }
    DALLOC(d->params, s->n_params);
    for (size_t i = 0; i < s->n_params; i++) {
        mt_model_param *p = &d->params[i];
        int64_t g[4], ls[4], of[4];
        *p = s->gparams[i];
        for (int a = 0; a < p->rank; a++)
            g[a] = (int64_t)p->shape[a];
        rc = mt_layout_shard(&s->playout[i], s->mesh, g, mt_mesh_device_at(s->mesh, d->pos), ls, of,
                             err);
        if (rc != MT_OK)
            return rc;
        p->size = 1;
        for (int a = 0; a < p->rank; a++) {
            p->local_shape[a] = (size_t)ls[a];
            p->offsets[a] = (size_t)of[a];
            p->size *= p->local_shape[a];
        }
        DALLOC(p->value, p->size);
        if (p->trainable) {
            if (s->fsdp[i] >= 0) /* the shard's (the bucket carries the whole gradient) */
                DALLOC(p->grad, p->size);
            if (slots > 0)
                DALLOC(p->slot1, p->size);
            if (slots > 1)
                DALLOC(p->slot2, p->size);
            mt_optim_init_slots(&s->opt, p->slot1, p->slot2, p->size);
        }
        rc = mt_model_param_init(p, s->seed, p->offsets, p->local_shape, p->value, err);
        if (rc != MT_OK)
            return rc;
    }
    DALLOC(d->wval, s->n_params);
    DALLOC(d->wgrad, s->n_params);
    {
        size_t n = MT_LOSS_NSUMS + 1, at = 0;
        for (size_t i = 0; i < s->n_params; i++)
            n += grad_in_bucket(s, d, i) ? bucket_grad_size(s, d, i) : 0;
        DALLOC(d->garena, n);
        for (size_t i = 0; i < s->n_params; i++) {
            if (!grad_in_bucket(s, d, i))
                continue;
            *(s->fsdp[i] >= 0 ? &d->wgrad[i] : &d->params[i].grad) = d->garena + at;
            at += bucket_grad_size(s, d, i);
        }
        d->msum = d->garena + at;
    }
    for (size_t i = 0; i < s->n_params; i++) {
        size_t use = d->params[i].size * dsz(s, s->bdim);
        if (s->fsdp[i] < 0)
            continue;
        if (s->fsdp[i] > 0 && d->wtmp == NULL)
            DALLOC(d->wtmp, fsdp_widest(s));
        if (s->fsdp_transient)
            continue;            /* pointers into the per-layer scratch */
        DALLOC(d->wval[i], use); /* the gradient (trainable): in the arena */
    }
    if (s->fsdp_transient) {
        size_t most = 0;
        for (int i = 0; i < s->n_layers; i++) {
            size_t n = fsdp_layer_size(s, &s->layers[i], d);
            most = n > most ? n : most;
        }
        if (most > 0) {
            DALLOC(d->fv, most);
            DALLOC(d->fg, most);
        }
        most = 0; /* under mesh_invariant no slice is added (fsdp_reduce_layer): none needed */
        for (int i = 0; s->inv_leaves == 0 && i < s->n_layers; i++)
            for (int k = 0; s->layers[i].grads_shared && k < MT_LAYER_MAX_PARAMS; k++)
                if (s->layers[i].has[k] && s->fsdp[s->layers[i].pi[k]] >= 0 &&
                    d->params[s->layers[i].pi[k]].size > most)
                    most = d->params[s->layers[i].pi[k]].size;
        if (most > 0)
            DALLOC(d->gtmp, most);
    }
    d->wstale = true;
    rc = mt_coll_bucket_new(&d->bucket, err);
    for (size_t i = 0; rc == MT_OK && i < s->n_params; i++) /* the arena's order */
        if (grad_in_bucket(s, d, i))
            rc = mt_coll_bucket_add(d->bucket, s->fsdp[i] >= 0 ? d->wgrad[i] : d->params[i].grad,
                                    bucket_grad_size(s, d, i), err);
    if (rc == MT_OK) /* the metrics ride along: one collective per step for all of it */
        rc = mt_coll_bucket_add(d->bucket, d->msum, MT_LOSS_NSUMS + 1, err);
    if (rc == MT_OK && s->zero_ok)
        rc = zero_bucket(d, err);
    if (rc != MT_OK)
        return rc;
    DALLOC(d->ls, (size_t)s->n_layers);
    DALLOC(d->x, b * (s->in_size / dsz(s, s->fdim0)));
    DALLOC(d->y, b * s->ydim);
    if (mt_loss_uses_targets(&s->loss, 1))
        DALLOC(d->tg, b * s->out_size);
    if (s->loss.metrics & (1u << MT_METRIC_AUC))
        DALLOC(d->hist, 2 * MT_LOSS_AUC_BINS);
    DALLOC(d->g1, b * s->widest);
    DALLOC(d->g2, b * s->widest);
    DALLOC(d->logits, b * s->out_size);
    DALLOC(d->dlogits, b * s->out_size);
    DALLOC(d->dlog_loc, b * s->out_size);
    if (s->inv_leaves > 0) {
        size_t most = MT_LOSS_NSUMS + 2 * s->widest;
        for (size_t i = 0; i < s->n_params; i++) /* global: FSDP gradients are whole */
            most = s->gparams[i].size > most ? s->gparams[i].size : most;
        if ((rc = mt_repro_acc_init(&d->acc_w, s->inv_leaves, most, err)) != MT_OK ||
            (rc = mt_repro_acc_init(&d->acc_b, s->inv_leaves, most, err)) != MT_OK ||
            (rc = mt_repro_acc_init(&d->acc_h, MT_REPRO_MAX_LEAVES, most + s->widest, err)) !=
                MT_OK)
            return rc;
        DALLOC(d->inv_scr, most);
    }
    {
        mt_layer_dev ld = dev_services(d);
        mt_layer_alloc la = {.count_only = false, .invariant = s->inv_leaves > 0};
        for (int i = 0; i < s->n_layers; i++)
            if ((rc = mt_layer_state_init(&s->layers[i], &d->ls[i], b, &ld, &la, err)) != MT_OK)
                return rc;
        if (la.work > 0)
            DALLOC(d->work, la.work);
    }
#undef DALLOC
    return MT_OK;
}

static void dev_free(dev *d)
{
    mt_spmd *s = d->s;
    for (int k = 0; k < MT_MESH_MAX_DIMS; k++)
        mt_free(d->groups[k]);
    for (size_t i = 0; d->params != NULL && i < s->n_params; i++) {
        mt_free(d->params[i].value);
        if (s->fsdp[i] >= 0) /* else in the arena */
            mt_free(d->params[i].grad);
        mt_free(d->params[i].slot1);
        mt_free(d->params[i].slot2);
    }
    mt_free(d->params);
    for (size_t i = 0; d->wval != NULL && !s->fsdp_transient && i < s->n_params; i++)
        mt_free(d->wval[i]);
    mt_free(d->garena); /* the kept FSDP copies' gradients too */
    mt_free(d->wval);
    mt_free(d->wgrad);
    mt_free(d->fv);
    mt_free(d->fg);
    mt_free(d->wtmp);
    mt_free(d->gtmp);
    for (int i = 0; d->ls != NULL && i < s->n_layers; i++)
        mt_layer_state_fini(&d->ls[i]);
    mt_free(d->ls);
    mt_free(d->work);
    mt_coll_bucket_free(d->bucket);
    mt_coll_bucket_free(d->vbucket);
    mt_coll_bucket_free(d->sbucket[0]);
    mt_coll_bucket_free(d->sbucket[1]);
    mt_free(d->x);
    mt_free(d->y);
    mt_free(d->tg);
    mt_free(d->hist);
    mt_free(d->g1);
    mt_free(d->g2);
    mt_free(d->logits);
    mt_free(d->dlogits);
    mt_free(d->dlog_loc);
    mt_free(d->gbuf);
    mt_repro_acc_free(&d->acc_w);
    mt_repro_acc_free(&d->acc_b);
    mt_repro_acc_free(&d->acc_h);
    mt_free(d->inv_scr);
}

/* ------------------------------------------------------------------ device: forward */

/* mesh_invariant: the pass runs the layers' leaf kernels on this device's leaves, in training and
 * in evaluation (an evaluation chunk is at most a global batch, cut into the same leaves). */
static void dev_leaves(dev *d, mt_layer_pass *ps)
{
    if (d->s->inv_leaves == 0)
        return;
    ps->leaves = d->s->inv_leaves;
    ps->leaf_examples = d->s->inv_r;
    ps->acc_w = &d->acc_w;
    ps->acc_b = &d->acc_b;
    ps->acc_h = &d->acc_h;
    ps->scratch = d->inv_scr;
    ps->tied = &d->tied;
}

/* Forward over d->xin (d->batch rows); leaves full logits in d->logits. */
static mt_code dev_forward(dev *d, size_t gb, bool training, uint64_t step, uint64_t first)
{
    mt_spmd *s = d->s;
    const mt_layer *last = &s->layers[s->n_layers - 1];
    mt_layer_dev ld = dev_services(d);
    mt_layer_pass ps = {.batch = d->batch,
                        .global_batch = gb,
                        .training = training,
                        .step = step,
                        .first = first,
                        .err = &d->err,
                        .work = d->work};
    dev_leaves(d, &ps);
    const float *out = NULL;
    int failed = 0;
    mt_code rc;

    if (!s->fsdp_transient && d->wstale && (rc = fsdp_gather(d)) != MT_OK)
        return rc;
    rc = mt_layer_graph_forward(s->layers, d->ls, s->n_layers, d->xin, &ld, &ps, &out, &failed);
    if (rc != MT_OK)
        return rc;
    if (last->of >= 0)
        return reshard(d, out, d->batch * s->osh_loc.rows, s->osh.c, last->of, -1, d->logits);
    memcpy(d->logits, out, d->batch * s->out_loc * sizeof(float));
    return MT_OK;
}

static mt_code dev_backward(dev *d)
{
    mt_spmd *s = d->s;
    const mt_layer *last = &s->layers[s->n_layers - 1];
    mt_layer_dev ld = dev_services(d);
    mt_layer_pass ps = {.batch = d->batch,
                        .global_batch = d->gcount,
                        .training = true,
                        .err = &d->err,
                        .work = d->work};
    dev_leaves(d, &ps);
    float *dy = d->dlogits;
    int failed = 0;

    if (last->of >= 0) {
        size_t cl = s->osh.c / dsz(s, last->of), off = (size_t)d->coords[last->of] * cl;
        for (size_t r = 0; r < d->batch * s->osh_loc.rows; r++)
            memcpy(d->dlog_loc + r * cl, d->dlogits + r * s->osh.c + off, cl * sizeof(float));
        dy = d->dlog_loc;
    }
    return mt_layer_graph_backward(s->layers, d->ls, s->n_layers, dy, &ld, &ps, &failed);
}

/* ------------------------------------------------------------------ device: jobs */

/* Sequence parallelism: the token ids of this device's rl positions (mt_layer_seq_blocks) of one
 * example src into dst. */
static void take_ids(const dev *d, float *dst, const float *src, size_t rl)
{
    const mt_spmd *s = d->s;
    size_t start[2],
        nb = mt_layer_seq_blocks(dsz(s, s->sdim), (size_t)d->coords[s->sdim], rl, start);
    for (size_t k = 0; k < nb; k++)
        memcpy(dst + k * (rl / nb), src + start[k], rl / nb * sizeof(float));
}

/* The labels of this device's positions of one example (its rows of the output: with
 * Megatron-SP's split output, member j of tdim holds rows [j·r, (j+1)·r) of its sdim rows). */
static void take_labels(const dev *d, int32_t *dst, const int32_t *src)
{
    const mt_spmd *s = d->s;
    size_t m = s->msp_out ? dsz(s, s->tdim) : 1, j = s->msp_out ? (size_t)d->coords[s->tdim] : 0;
    size_t rl = s->ydim_loc * m;
    for (size_t r = 0; r < s->ydim_loc; r++)
        dst[r] = src[mt_layer_seq_position(dsz(s, s->sdim), (size_t)d->coords[s->sdim], rl,
                                           j * s->ydim_loc + r)];
}

/*
 * Take n input rows x (whole examples, borrowed for the job) with labels y: d->xin reads them in
 * place when the device uses whole rows and the first layer only reads its input (dense, conv2d
 * write their own buffers; a flatten or dropout could alias it and a relu would write to it),
 * otherwise this device's feature slice (or the band of rows of an image sharded on its height)
 * is copied into d->x.
 */
static void dev_take_rows(dev *d, const float *x, const int32_t *y, const float *t, size_t n)
{
    mt_spmd *s = d->s;
    size_t fl = s->in_size / dsz(s, s->fdim0) / dsz(s, s->hdim0);

    d->batch = n;
    if (n > 0 && y != NULL && s->sdim < 0) /* an empty piece may have NULL rows */
        memcpy(d->y, y, n * s->ydim * sizeof(int32_t));
    for (size_t r = 0; n > 0 && y != NULL && s->sdim >= 0 && r < n; r++) /* its positions' */
        take_labels(d, d->y + r * s->ydim_loc, y + r * s->ydim);
    d->has_tg = t != NULL && d->tg != NULL;
    if (n > 0 && d->has_tg)
        memcpy(d->tg, t, n * s->out_size * sizeof(float));
    if (n > 0 && mt_spmd_rows_in_place(s)) {
        d->xin = x;
        return;
    }
    for (size_t r = 0; r < n; r++) {
        const float *src = x + r * s->in_size;
        if (s->sdim >= 0) { /* the token ids of its positions */
            take_ids(d, d->x + r * fl, src, fl);
            continue;
        }
        if (s->fdim0 >= 0)
            src += (size_t)d->coords[s->fdim0] * fl;
        if (s->hdim0 >= 0) /* the band: fl consecutive floats of the NHWC example */
            src += (size_t)d->coords[s->hdim0] * fl;
        memcpy(d->x + r * fl, src, fl * sizeof(float));
    }
    d->xin = d->x;
}

/* This device's slice of the job's global batch (rows start.. start + n of s->jx). */
static void dev_take_batch(dev *d, size_t start, size_t n)
{
    mt_spmd *s = d->s;
    size_t row0 = 0, len = n;

    if (s->inv_leaves > 0) { /* mesh_invariant: this device's block of whole leaves */
        int first = (s->bdim >= 0 ? d->coords[s->bdim] : 0) * s->inv_leaves;
        size_t a, la, b, lb;
        mt_repro_leaf_range(s->inv_batch, n, first, &a, &la);
        mt_repro_leaf_range(s->inv_batch, n, first + s->inv_leaves - 1, &b, &lb);
        row0 = a;
        len = b + lb - a;
    } else if (s->bdim >= 0)
        mt_data_rebatch_split(n, (size_t)s->dimsz[s->bdim], (size_t)d->coords[s->bdim], &row0,
                              &len);
    d->row0 = start + row0;
    dev_take_rows(d, s->jx + (start + row0) * s->in_size,
                  s->jy != NULL ? s->jy + (start + row0) * s->ydim : NULL,
                  s->jt != NULL ? s->jt + (start + row0) * s->out_size : NULL, len);
}

/*
 * Pieces step: copy this device's piece (by its batch coordinate) and agree with every replica on
 * the step's example count, so a replica whose pipeline ran out still joins every collective and
 * all stop at the same step. The count was agreed by the previous step when its caller announced
 * this step's piece sizes (s->jahead: they rode in that step's gradient bucket); otherwise it is
 * an allreduce of the piece sizes over the batch dimension here.
 */
static mt_code dev_take_piece(dev *d, size_t *count, uint64_t *first)
{
    mt_spmd *s = d->s;
    const mt_spmd_piece *pc = &s->jpieces[s->bdim >= 0 ? d->coords[s->bdim] : 0];
    float c;
    mt_code rc;

    d->row0 = 0;
    dev_take_rows(d, pc->x, pc->y, pc->t, pc->n);
    *first = pc->first_example;
    if (s->jahead) {
        *count = s->ahead_count;
        return MT_OK;
    }
    c = (float)pc->n;
    rc = grp_allreduce(d, s->bdim, &c, 1);
    *count = (size_t)c;
    return rc;
}

/*
 * Global-norm clipping: the factor every gradient is multiplied by. Each device adds its shards'
 * squared gradients weighted by (distinct shards of the parameter / devices), so the sum over
 * the whole mesh (an allreduce over every dim) counts each logical element once.
 */
static mt_code dev_clip_scale(dev *d, float *scale)
{
    mt_spmd *s = d->s;
    double sq = 0.0;
    float x;

    for (size_t i = 0; i < s->n_params; i++) {
        const mt_model_param *p = &d->params[i];
        double local = 0.0, shards = 1.0;
        if (!p->trainable)
            continue;
        for (int a = 0; a < p->rank; a++)
            shards *= (double)dsz(s, dim_of(s, &s->playout[i], a));
        for (size_t e = 0; e < p->size; e++)
            local += (double)p->grad[e] * p->grad[e];
        sq += local * shards / (double)s->ndev;
    }
    x = (float)sq;
    for (int k = 0; k < s->ndims; k++) {
        mt_code rc = grp_allreduce(d, k, &x, 1);
        if (rc != MT_OK)
            return rc;
    }
    *scale = mt_optim_clip_scale(&s->opt, x);
    return MT_OK;
}

/*
 * mesh_invariant: global-norm clipping whose factor does not depend on the mesh. Each logical
 * gradient element is added once — by the devices at coordinate 0 of every dim that does not
 * shard its parameter — into core/repro's exact sum of squares, which the allreduce over every
 * dim adds as exact integers (docs/reproducibility.md, point 7).
 */
static mt_code dev_clip_scale_inv(dev *d, float *scale)
{
    mt_spmd *s = d->s;
    mt_repro_sumsq sq;
    float buf[MT_REPRO_SUMSQ_FLOATS];

    mt_repro_sumsq_init(&sq);
    for (size_t i = 0; i < s->n_params; i++) {
        const mt_model_param *p = &d->params[i];
        bool mine = p->trainable;
        for (int k = 0; mine && k < s->ndims; k++) {
            bool splits = false;
            for (int a = 0; a < p->rank; a++)
                splits = splits || dim_of(s, &s->playout[i], a) == k;
            mine = splits || d->coords[k] == 0;
        }
        if (mine)
            mt_repro_sumsq_add(&sq, p->grad, p->size);
    }
    mt_repro_sumsq_pack(&sq, buf);
    for (int k = 0; k < s->ndims; k++) {
        mt_code rc = grp_allreduce(d, k, buf, MT_REPRO_SUMSQ_FLOATS);
        if (rc != MT_OK)
            return rc;
    }
    *scale = mt_optim_clip_scale(&s->opt, mt_repro_sumsq_unpack(buf));
    return MT_OK;
}

/* mesh_invariant: the device's position leaves of the loss (a sequence's Lt = mt_repro_leaves(T)
 * over the positions' dim, docs/reproducibility.md "Position leaves"), or 0 for an output of one
 * position per example (a vector, an image): one sum per batch leaf. */
static int loss_pleaves(const mt_spmd *s)
{
    const mt_layer *last = &s->layers[s->n_layers - 1];
    int lt = last->out_rank == 2 ? mt_repro_leaves(last->out_shape[0]) : 1;
    return lt > 1 ? lt / (int)dsz(s, s->sdim) : 0;
}

/*
 * The loss sums of the batch leaf of examples [a, a + n) into slot (floats) over lh position
 * leaves: per position leaf (the zig-zag canonical order of mt_repro_bands) one double chain over
 * the leaf's examples, then its rows, rounded to float; folded in d->acc_h, whose top is the
 * allreduce over the positions' dim (run on every device, also for an empty leaf).
 */
static mt_code loss_leaf_positions(dev *d, const mt_loss_batch *all, size_t a, size_t n, int lh,
                                   float *slot)
{
    mt_spmd *s = d->s;
    size_t rl = s->osh_loc.rows, c = s->osh.c, per = mt_loss_units(&s->loss, &s->osh_loc) / rl;
    mt_repro_bands pb = {.lh = lh, .hrows = rl, .zig = true};
    mt_loss_shape sh = {rl / (size_t)lh, c};
    mt_code rc = MT_OK, arc;

    mt_repro_acc_reset(&d->acc_h, MT_LOSS_NSUMS);
    for (int j = 0; j < lh; j++) {
        double ls[MT_LOSS_NSUMS] = {0};
        float *ps = mt_repro_acc_slot(&d->acc_h);
        for (size_t e = a; e < a + n && rc == MT_OK; e++) {
            size_t row = e * rl + mt_repro_bands_row(&pb, j);
            mt_loss_batch b = *all;
            b.out = all->out + row * c;
            b.n = 1;
            b.labels = all->labels != NULL ? all->labels + row * per : NULL;
            b.targets = all->targets != NULL ? all->targets + row * per : NULL;
            rc = mt_loss_forward(&s->loss, &sh, &b, false, d->dlogits + row * c, ls, NULL, &d->err);
        }
        for (int k = 0; k < MT_LOSS_NSUMS; k++)
            ps[k] = (float)ls[k];
        mt_repro_acc_push(&d->acc_h);
    }
    memcpy(slot, mt_repro_acc_result(&d->acc_h), MT_LOSS_NSUMS * sizeof(float));
    arc = grp_allreduce(d, s->sdim, slot, MT_LOSS_NSUMS);
    return rc != MT_OK ? rc : arc;
}

/* mesh_invariant training step: the loss per leaf, each leaf's sums (double inside the leaf, or
 * its position leaves: loss_leaf_positions) rounded to float and folded in the leaf tree; sums
 * (zero on entry) get the device's subtree. */
static mt_code dev_loss_leaves(dev *d, const mt_loss_batch *all, double *sums)
{
    mt_spmd *s = d->s;
    const float *res;
    int lh = loss_pleaves(s);
    mt_code rc = MT_OK;

    mt_repro_acc_reset(&d->acc_b, MT_LOSS_NSUMS);
    for (int i = 0; i < s->inv_leaves && (rc == MT_OK || lh > 0); i++) { /* lh: collectives */
        size_t a = (size_t)i * s->inv_r, n = 0;
        double ls[MT_LOSS_NSUMS] = {0};
        float *slot = mt_repro_acc_slot(&d->acc_b);
        mt_loss_batch b = *all;
        if (a < d->batch)
            n = d->batch - a < s->inv_r ? d->batch - a : s->inv_r;
        if (lh > 0) {
            mt_code lrc = loss_leaf_positions(d, all, a, n, lh, slot);
            rc = rc != MT_OK ? rc : lrc;
            mt_repro_acc_push(&d->acc_b);
            continue;
        }
        b.out = all->out + a * s->out_size;
        b.n = n;
        b.labels = all->labels != NULL ? all->labels + a * s->ydim : NULL;
        b.targets = all->targets != NULL ? all->targets + a * s->out_size : NULL;
        if (n > 0)
            rc = mt_loss_forward(&s->loss, &s->osh, &b, false, d->dlogits + a * s->out_size, ls,
                                 NULL, &d->err);
        for (int k = 0; k < MT_LOSS_NSUMS; k++)
            slot[k] = (float)ls[k];
        mt_repro_acc_push(&d->acc_b);
    }
    res = mt_repro_acc_result(&d->acc_b);
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        sums[k] = res[k];
    return rc;
}

/* The loss of d's batch (d->logits against d->y / d->tg) for a global count of gcount examples:
 * adds to sums and hist; the gradient to d->dlogits when dout. */
static mt_code dev_loss(dev *d, size_t gcount, bool dout, double *sums, double *hist)
{
    mt_spmd *s = d->s;
    mt_loss_batch b = {d->logits, d->batch, d->has_tg ? NULL : d->y, d->has_tg ? d->tg : NULL,
                       mt_loss_grad_scale(&s->loss, &s->osh, gcount)};
    if (s->inv_leaves > 0) { /* the sums per leaf; the AUC histogram counts (exact in any order) */
        double unused[MT_LOSS_NSUMS] = {0};
        mt_code rc = dev_loss_leaves(d, &b, sums);
        if (rc == MT_OK && hist != NULL)
            rc = mt_loss_forward(&s->loss, &s->osh_loc, &b, false, NULL, unused, hist, &d->err);
        return rc;
    }
    return mt_loss_forward(&s->loss, &s->osh_loc, &b, false, dout ? d->dlogits : NULL, sums, hist,
                           &d->err);
}

/*
 * mesh_invariant with per-replica pieces: they must be this step's global batch in order (the
 * pieces' flag, the same on every device) cut into the replicas' blocks of whole leaves (the
 * pipeline's plan does that: mt_data_plan_opts.leaf_examples).
 */
static mt_code pieces_are_leaves(dev *d, size_t n)
{
    mt_spmd *s = d->s;
    int g = s->bdim >= 0 ? d->coords[s->bdim] : 0;
    const mt_spmd_piece *pc = &s->jpieces[g];
    size_t a, la, b, lb;

    if (!pc->global_order)
        return mt_err_set(&d->err, MT_UNIMPLEMENTED,
                          "reproducibility: \"mesh_invariant\" needs the dataset's global batch "
                          "(\"batching\": \"global\"): batches made per replica depend on the "
                          "number of replicas");
    mt_repro_leaf_range(s->inv_batch, n, g * s->inv_leaves, &a, &la);
    mt_repro_leaf_range(s->inv_batch, n, (g + 1) * s->inv_leaves - 1, &b, &lb);
    if (pc->n != b + lb - a)
        return mt_err_set(&d->err, MT_INTERNAL,
                          "mesh_invariant: replica %d got %zu of the step's %zu examples, not "
                          "its %zu of whole leaves",
                          g, pc->n, n, b + lb - a);
    return MT_OK;
}

/* After the step's reduction: the global loss sums and the next step's count out of msum. */
static void dev_took_sums(dev *d)
{
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        d->sums[k] = d->msum[k];
    d->next = (size_t)d->msum[MT_LOSS_NSUMS];
}

/*
 * The sharded update (s->zero, ZeRO-1) in place of the gradient allreduce and the replicated
 * update: the bucket is reduce-scattered over the batch dim, this replica applies the optimizer
 * to its chunk of the fused gradients (the weights and slots of those elements), and one allgather
 * of the value bucket brings every other replica's updated weights and the reduced msum. The same
 * bytes move as in the allreduce; each replica updates 1/p of the weights. The slots of the other
 * chunks stay as they were: only the owner of an element's chunk keeps its slots current, which is
 * why the checkpoint gathers ask the owners (zero_slot_owner).
 */
static mt_code dev_update_sharded(dev *d)
{
    mt_spmd *s = d->s;
    mt_coll_group g = {d->groups[s->bdim], s->dimsz[s->bdim]};
    size_t off = 0, len = 0, at = 0;
    float *chunk = NULL;
    mt_code rc;

    mt_coll_comm_axis(d->comm, mt_mesh_dim_name(s->mesh, s->bdim));
    rc = mt_coll_bucket_reduce_scatter(d->bucket, d->comm, &g, NULL, &chunk, &off, &len, &d->err);
    if (rc != MT_OK)
        return rc;
    d->t++;
    mt_coll_comm_activity(d->comm, "optimizer update");
    for (size_t i = 0; i < s->n_params; i++) {
        mt_model_param *p = &d->params[i];
        size_t lo, hi;
        if (!p->trainable)
            continue;
        lo = at > off ? at : off;
        hi = at + p->size < off + len ? at + p->size : off + len;
        if (lo < hi)
            mt_optim_apply(&s->opt, d->t, 1.0f, p->value + (lo - at),
                           p->slot1 != NULL ? p->slot1 + (lo - at) : NULL,
                           p->slot2 != NULL ? p->slot2 + (lo - at) : NULL, chunk + (lo - off),
                           hi - lo);
        at += p->size;
    }
    for (size_t k = 0; k <= MT_LOSS_NSUMS; k++) /* the reduced sums this replica holds */
        if (at + k >= off && at + k < off + len)
            d->msum[k] = chunk[at + k - off];
    d->slots_stale = true;
    mt_coll_comm_activity(d->comm, "weights allgather");
    rc = mt_coll_bucket_allgather(d->vbucket, d->comm, &g, NULL, &d->err);
    if (rc == MT_OK)
        dev_took_sums(d);
    return rc;
}

/* zero_sync on one device: each slot's chunks from their owners (the allgather of sbucket). */
static mt_code dev_slots(dev *d)
{
    mt_spmd *s = d->s;
    mt_coll_group g = {d->groups[s->bdim], s->dimsz[s->bdim]};
    mt_code rc = MT_OK;

    mt_coll_comm_axis(d->comm, mt_mesh_dim_name(s->mesh, s->bdim));
    mt_coll_comm_activity(d->comm, "optimizer slots allgather");
    for (int k = 0; rc == MT_OK && k < 2; k++) {
        mt_coll_call call = s->jcall;
        call.seq = (uint32_t)k;
        if (d->sbucket[k] != NULL)
            rc = mt_coll_bucket_allgather(d->sbucket[k], d->comm, &g, &call, &d->err);
    }
    if (rc == MT_OK)
        d->slots_stale = false;
    return rc;
}

static mt_code dev_step(dev *d)
{
    mt_spmd *s = d->s;
    double sums[MT_LOSS_NSUMS] = {0};
    size_t n = s->jn;
    uint64_t first;
    float scale = 1.0f;
    mt_code rc;

    mt_coll_comm_set_step(d->comm, s->jstep);
    mt_coll_comm_activity(d->comm, "reading input");
    if (s->jpieces != NULL) {
        rc = dev_take_piece(d, &n, &first);
        d->gcount = n;
        if (rc != MT_OK || n == 0)
            return rc; /* every replica is empty: the end of the epoch, agreed by all */
        if (s->inv_leaves > 0 && (rc = pieces_are_leaves(d, n)) != MT_OK)
            return rc;
    } else {
        dev_take_batch(d, 0, s->jn);
        first = s->jfirst + d->row0;
        d->gcount = n;
    }
    mt_coll_comm_activity(d->comm, "computing");
    rc = dev_forward(d, n, true, s->jstep, first);
    if (rc == MT_OK)
        rc = dev_loss(d, n, true, sums, NULL);
    if (rc == MT_OK)
        rc = dev_backward(d);
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        d->msum[k] = (float)sums[k];
    d->msum[MT_LOSS_NSUMS] = s->jnext != NULL && (seq_bucket_dim(s) < 0 || d->coords[s->sdim] == 0)
                                 ? (float)s->jnext[s->bdim >= 0 ? d->coords[s->bdim] : 0]
                                 : 0.0f; /* counted once per group of the positions' devices */
    if (rc == MT_OK && s->msp_out)       /* the output rows split over tdim too: their sums */
        rc = grp_allreduce(d, s->tdim, d->msum, MT_LOSS_NSUMS);
    if (rc == MT_OK && s->zero)
        return dev_update_sharded(d);
    for (int k = 0; k < 2 && rc == MT_OK; k++) { /* over batch, then over the positions */
        int dim = k == 0 ? s->bdim : seq_bucket_dim(s);
        mt_coll_group g = {dim >= 0 ? d->groups[dim] : NULL, dim >= 0 ? s->dimsz[dim] : 0};
        if (dim < 0)
            continue;
        mt_coll_comm_axis(d->comm, mt_mesh_dim_name(s->mesh, dim));
        rc = mt_coll_bucket_allreduce(d->bucket, d->comm, &g, NULL, &d->err);
    }
    if (rc != MT_OK)
        return rc;
    dev_took_sums(d);
    d->t++;
    mt_coll_comm_activity(d->comm, "optimizer update");
    for (size_t i = 0; i < s->n_params; i++)
        if (d->params[i].trainable && s->fsdp[i] >= 0 && !s->fsdp_transient) {
            fsdp_slice(d, i, d->wgrad[i], d->params[i].grad);
            d->wstale = true;
        }
    if (s->opt.global_clipnorm > 0.0f &&
        (rc = s->inv_leaves > 0 ? dev_clip_scale_inv(d, &scale) : dev_clip_scale(d, &scale)) !=
            MT_OK)
        return rc;
    for (size_t i = 0; i < s->n_params; i++) {
        mt_model_param *p = &d->params[i];
        if (p->trainable)
            mt_optim_apply(&s->opt, d->t, scale, p->value, p->slot1, p->slot2, p->grad, p->size);
    }
    return MT_OK;
}

/* Evaluation: per global chunk, the local sums (and AUC histogram) are allreduced over the batch
 * dim as floats and added up in double. */
static mt_code dev_eval(dev *d)
{
    mt_spmd *s = d->s;
    size_t nh = d->hist != NULL ? 2 * MT_LOSS_AUC_BINS : 0;
    float buf[MT_LOSS_NSUMS + 2 * MT_LOSS_AUC_BINS];
    mt_code rc;

    memset(d->sums, 0, sizeof(d->sums));
    if (d->hist != NULL)
        memset(d->hist, 0, nh * sizeof(double));
    mt_coll_comm_set_step(d->comm, s->jstep);
    mt_coll_comm_activity(d->comm, "evaluating");
    for (size_t i = 0; i < s->jn; i += s->max_gb) {
        size_t n = s->jn - i < s->max_gb ? s->jn - i : s->max_gb;
        double sums[MT_LOSS_NSUMS] = {0}, hist[2 * MT_LOSS_AUC_BINS];
        memset(hist, 0, sizeof(hist));
        dev_take_batch(d, i, n);
        rc = dev_forward(d, n, false, 0, i);
        if (rc == MT_OK)
            rc = dev_loss(d, n, false, sums, nh > 0 ? hist : NULL);
        if (rc != MT_OK)
            return rc;
        for (size_t k = 0; k < MT_LOSS_NSUMS; k++)
            buf[k] = (float)sums[k];
        for (size_t k = 0; k < nh; k++)
            buf[MT_LOSS_NSUMS + k] = (float)hist[k];
        if ((rc = grp_allreduce(d, s->bdim, buf, MT_LOSS_NSUMS + nh)) != MT_OK ||
            (rc = grp_allreduce(d, seq_bucket_dim(s), buf, MT_LOSS_NSUMS + nh)) != MT_OK ||
            (s->msp_out && (rc = grp_allreduce(d, s->tdim, buf, MT_LOSS_NSUMS + nh)) != MT_OK))
            return rc;
        for (size_t k = 0; k < MT_LOSS_NSUMS; k++)
            d->sums[k] += buf[k];
        for (size_t k = 0; k < nh; k++)
            d->hist[k] += buf[MT_LOSS_NSUMS + k];
    }
    return MT_OK;
}

static mt_code dev_gather(dev *d);
static mt_code dev_agree(dev *d);
static mt_code dev_digest(dev *d);

/*
 * Hand-off between the host thread and the device threads. Every step hands a job to the device
 * threads and collects them, so a sleep and a wake-up (a futex syscall and a trip through the
 * scheduler, which on a loaded 2-core machine can take a whole time slice) are paid twice per step
 * per thread. With ONE local device (a worker per device) the host thread runs it itself: no
 * hand-off at all. With several, every device has its own thread and the host only waits: a host
 * that ran a device right after waking the others was measured 1.3-1.5x slower (Linux places the
 * woken thread on the waker's busy core, so the devices ran in turn, 0.57 CPUs used instead of
 * 0.84). A waiter spins for a while before it sleeps on the condition variable: the devices of
 * one step finish together (they meet in the gradient allreduce), so the host's wait for the
 * others is usually short. Spinning is bounded and adaptive: at most SPIN_US, halved after each
 * spin that ended in a sleep (down to SPIN_MIN_US) and doubled after each that did not, because
 * on a machine with more runnable threads than cores a long spin steals the time slice of the
 * thread being waited for.
 */
#define SPIN_US     50
#define SPIN_MIN_US 2

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * Spin while (*v == x) == while_equal, for at most *budget microseconds; true when the condition
 * ended. Adapts *budget (the caller's, between SPIN_MIN_US and SPIN_US) to how the last spin went.
 */
static bool spin_while(_Atomic uint64_t *v, uint64_t x, bool while_equal, int *budget)
{
    int64_t until = 0;
    for (unsigned i = 0;; i++) {
        if ((atomic_load_explicit(v, memory_order_acquire) == x) != while_equal) {
            *budget = *budget * 2 < SPIN_US ? *budget * 2 : SPIN_US;
            return true;
        }
        if ((i & 63) == 63) {
            int64_t now = mt_clock_mono_us();
            if (until == 0) {
                until = now + *budget;
            } else if (now >= until) {
                *budget = *budget / 2 > SPIN_MIN_US ? *budget / 2 : SPIN_MIN_US;
                return false;
            }
        }
        cpu_relax();
    }
}

static void dev_run(dev *d, job_kind job)
{
    mt_err_clear(&d->err);
    d->rc = job == JOB_STEP     ? dev_step(d)
            : job == JOB_EVAL   ? dev_eval(d)
            : job == JOB_GATHER ? dev_gather(d)
            : job == JOB_SLOTS  ? dev_slots(d)
            : job == JOB_DIGEST ? dev_digest(d)
                                : dev_agree(d);
    if (d->rc == MT_OK) /* after a failure the record keeps where it stopped */
        mt_coll_comm_activity(d->comm, "idle: waiting for the next batch from the host");
    if (d->rc != MT_OK && d->err.code == MT_OK)
        mt_err_set(&d->err, d->rc, "failed");
}

static void *dev_main(void *arg)
{
    dev *d = arg;
    mt_spmd *s = d->s;
    uint64_t seen = 0;
    int budget = SPIN_US;

    pthread_setname_np(pthread_self(), "mt-dev");
    for (;;) {
        job_kind job;
        if (!spin_while(&s->gen, seen, true, &budget)) {
            pthread_mutex_lock(&s->mu);
            while (atomic_load(&s->gen) == seen)
                pthread_cond_wait(&s->cv_job, &s->mu);
            pthread_mutex_unlock(&s->mu);
        }
        seen = atomic_load_explicit(&s->gen, memory_order_acquire);
        job = s->job;
        if (job == JOB_QUIT)
            return NULL;
        dev_run(d, job);
        /* the host checks `done` under mu before it sleeps: signalling under mu cannot be lost */
        if (atomic_fetch_add_explicit(&s->done, 1, memory_order_acq_rel) + 1 == s->nthreads) {
            pthread_mutex_lock(&s->mu);
            pthread_cond_signal(&s->cv_done);
            pthread_mutex_unlock(&s->mu);
        }
    }
}

/* Post a job to every device and wait; the first failing device's error wins. */
static mt_code run_job(mt_spmd *s, job_kind job, mt_err *err)
{
    if (s->nthreads == 0) { /* the only local device runs here */
        if (job != JOB_QUIT)
            dev_run(&s->devs[s->first_local], job);
    } else {
        s->job = job;
        atomic_store_explicit(&s->done, 0, memory_order_relaxed);
        pthread_mutex_lock(&s->mu);
        atomic_fetch_add_explicit(&s->gen, 1, memory_order_release); /* publishes the job */
        pthread_cond_broadcast(&s->cv_job);
        pthread_mutex_unlock(&s->mu);
        if (job == JOB_QUIT)
            return MT_OK;
        if (!spin_while(&s->done, s->nthreads, false, &s->spin_budget)) {
            pthread_mutex_lock(&s->mu);
            while (atomic_load(&s->done) < s->nthreads)
                pthread_cond_wait(&s->cv_done, &s->mu);
            pthread_mutex_unlock(&s->mu);
        }
    }
    for (int p = 0; p < s->ndev; p++)
        if (s->devs[p].comm != NULL && s->devs[p].rc != MT_OK)
            return mt_err_set(err, s->devs[p].rc, "device %d: %s", p, s->devs[p].err.msg);
    return MT_OK;
}

/* ------------------------------------------------------------------ public */

/* A trainer with its plan made and no devices: the first half of mt_spmd_new (mt_spmd_check). */
static mt_code spmd_plan_new(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                             int in_rank, const size_t *in_shape, size_t max_global_batch,
                             mt_spmd **out, mt_err *err)
{
    mt_spmd *s;
    mt_code rc;

    *out = NULL;
    if (in_rank < 1 || in_rank > 3 || max_global_batch == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "spmd: bad input rank or batch");
    s = mt_calloc(1, sizeof(*s));
    if (s == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "spmd: out of memory");
    s->mesh = mesh;
    s->ndev = mt_mesh_num_devices(mesh);
    s->ndims = mt_mesh_ndims(mesh);
    for (int k = 0; k < s->ndims; k++)
        s->dimsz[k] = mt_mesh_dim_size(mesh, k);
    s->opt = spec->optimizer;
    s->seed = spec->seed;
    s->fsdp_transient = spec->fsdp_reshard_after_forward;
    s->in_rank = in_rank;
    s->in_size = 1;
    for (int a = 0; a < in_rank; a++) {
        s->in_shape[a] = in_shape[a];
        s->in_size *= in_shape[a];
    }
    s->max_gb = max_global_batch;
    if (spec->input_rank != 0 &&
        (spec->input_rank != in_rank ||
         memcmp(spec->input_shape, in_shape, (size_t)in_rank * sizeof(size_t)) != 0)) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "model.input_shape: does not match the dataset's examples");
        goto fail;
    }
    rc = plan(s, spec, map, err);
    if (rc != MT_OK)
        goto fail;
    s->max_b = s->bdim >= 0
                   ? (max_global_batch + (size_t)s->dimsz[s->bdim] - 1) / (size_t)s->dimsz[s->bdim]
                   : max_global_batch;
    *out = s;
    return MT_OK;
fail:
    mt_spmd_free(s);
    return rc;
}

mt_code mt_spmd_new(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                    int in_rank, const size_t *in_shape, size_t max_global_batch,
                    mt_coll_world *world, mt_spmd **out, mt_err *err)
{
    mt_spmd *s;
    mt_code rc;

    *out = NULL;
    rc = spmd_plan_new(spec, mesh, map, in_rank, in_shape, max_global_batch, &s, err);
    if (rc != MT_OK)
        return rc;
    if (world == NULL) {
        rc = mt_coll_world_new_local(s->ndev, NULL, &s->own_world, err);
        if (rc != MT_OK)
            goto fail;
        world = s->own_world;
    }
    if (mt_coll_world_size(world) != s->ndev) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "spmd: world has %d ranks, mesh %d devices",
                        mt_coll_world_size(world), s->ndev);
        goto fail;
    }
    s->world = world;
    s->devs = mt_calloc((size_t)s->ndev, sizeof(dev));
    s->ahead_mine = mt_calloc((size_t)mt_spmd_batch_replicas(s), sizeof(size_t));
    s->all_pos = mt_calloc((size_t)s->ndev, sizeof(int));
    if (s->devs == NULL || s->ahead_mine == NULL || s->all_pos == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "spmd: out of memory");
        goto fail;
    }
    for (int p = 0; p < s->ndev; p++)
        s->all_pos[p] = p;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_job, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    s->sync_init = true;
    s->first_local = -1;
    for (int p = 0; p < s->ndev; p++) {
        s->devs[p].s = s;
        s->devs[p].pos = p;
        s->devs[p].comm = mt_coll_world_comm(world, p);
        if (s->devs[p].comm != NULL && s->nlocal++ == 0)
            s->first_local = p;
        rc = dev_alloc(&s->devs[p], err);
        if (rc != MT_OK)
            goto fail;
    }
    if (s->nlocal == 0) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "spmd: no device of the mesh is in this process");
        goto fail;
    }
    s->nthreads = s->nlocal > 1 ? (uint64_t)s->nlocal : 0;
    s->spin_budget = SPIN_US;
    for (int p = 0; p < s->ndev; p++) {
        if (s->devs[p].comm == NULL || s->nthreads == 0)
            continue; /* one local device: the host thread runs it (run_job) */
        if (pthread_create(&s->devs[p].thread, NULL, dev_main, &s->devs[p]) != 0) {
            rc = mt_err_set(err, MT_INTERNAL, "spmd: cannot start device thread %d", p);
            goto fail;
        }
        s->devs[p].started = true;
    }
    *out = s;
    return MT_OK;
fail:
    mt_spmd_free(s);
    return rc;
}

/* Elements of parameter i's shard on the device at mesh position pos (0 on error). */
static uint64_t shard_elems(const mt_spmd *s, size_t i, int pos)
{
    const mt_model_param *g = &s->gparams[i];
    int64_t shape[4], ls[4], of[4];
    uint64_t n = 1;
    for (int a = 0; a < g->rank; a++)
        shape[a] = (int64_t)g->shape[a];
    if (mt_layout_shard(&s->playout[i], s->mesh, shape, mt_mesh_device_at(s->mesh, pos), ls, of,
                        NULL) != MT_OK)
        return 0;
    for (int a = 0; a < g->rank; a++)
        n *= (uint64_t)ls[a];
    return n;
}

static void comm_add(uint64_t *per_dim, int dim, uint64_t n)
{
    if (dim >= 0)
        per_dim[dim] += n;
}

/* A planner for questions about a planned trainer (no parameters are added): the shardings,
 * the dims' names and sizes. */
static mt_layer_planner query_planner(planner_ctx *pc)
{
    mt_layer_planner pl = {.ctx = pc,
                           .param_dim = plan_param_dim,
                           .dim_name = plan_dim_name,
                           .dim_size = plan_dim_size,
                           .sdim = pc->s->sdim,
                           .tdim = pc->s->tdim,
                           .invariant = pc->s->inv_leaves > 0};
    return pl;
}

/* How many layers use parameter i (a tied head uses its embedding's table: 2), and how many of
 * them reduce-scatter its gradient in FSDP's per-layer mode (fsdp_reduce_layer: each, but under
 * mesh_invariant the tied head leaves it to the embedding). */
static int param_uses(const mt_spmd *s, size_t i, int *reduces)
{
    int uses = 0;
    *reduces = 0;
    for (int l = 0; l < s->n_layers; l++)
        for (int k = 0; k < MT_LAYER_MAX_PARAMS; k++)
            if (s->layers[l].has[k] && s->layers[l].pi[k] == i) {
                uses++;
                *reduces += !inv_tied_kernel(s, &s->layers[l], i);
            }
    return uses;
}

/* The collective payload of one training step on one device, per mesh dim (floats): each
 * layer's (mt_layer_ops.comm), the logits, the FSDP gathers and the gradient bucket. In FSDP's
 * per-layer mode a parameter is gathered for every layer that uses it, forward and backward. */
static void plan_comm(mt_spmd *s, uint64_t *per_dim)
{
    uint64_t b = s->max_b, grads = MT_LOSS_NSUMS + 1; /* the bucket: gradients, metric sums and
                                                         the next step's count */
    planner_ctx pc = {s, NULL};
    mt_layer_planner pl = query_planner(&pc);
#define ADD(dim, n) comm_add(per_dim, (dim), (uint64_t)(n))
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i].ops->comm != NULL)
            s->layers[i].ops->comm(&s->layers[i], b, s->bdim, &pl, comm_add, per_dim);
    if (s->layers[s->n_layers - 1].of >= 0)
        ADD(s->layers[s->n_layers - 1].of, b * s->out_loc);
    for (size_t i = 0; i < s->n_params; i++) {
        uint64_t use = shard_elems(s, i, 0) * (s->fsdp[i] >= 0 ? dsz(s, s->bdim) : 1);
        bool per_layer = s->fsdp[i] >= 0 && s->fsdp_transient;
        int reduces, uses = per_layer ? param_uses(s, i, &reduces) : 0;
        if (s->gparams[i].trainable && !per_layer)
            grads += use;
        if (s->fsdp[i] >= 0) /* allgathered once, or per using layer for forward and backward */
            ADD(s->bdim, per_layer ? 2 * (uint64_t)uses * use : use);
        if (per_layer && s->gparams[i].trainable) {
            ADD(s->bdim, (uint64_t)reduces * use); /* reduce-scatters, after the positions' sum */
            ADD(seq_bucket_dim(s), (uint64_t)reduces * use);
        }
    }
    ADD(s->bdim, grads);
    ADD(seq_bucket_dim(s), grads); /* sequence parallelism: the bucket again, over the positions */
#undef ADD
}

/* Height bands: the dim and the halo exchanges' bytes per step of one device (docs/spmd.md). */
static void plan_halo(mt_spmd *s, mt_spmd_plan_info *info)
{
    planner_ctx pc = {s, NULL};
    mt_layer_planner pl = query_planner(&pc);
    info->halo_dim = s->hdim0;
    info->halo_bytes = 0;
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i].ops->halo != NULL)
            info->halo_bytes +=
                s->layers[i].ops->halo(&s->layers[i], s->max_b, &pl) * sizeof(float);
}

mt_code mt_spmd_check(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                      int in_rank, const size_t *in_shape, size_t global_batch,
                      mt_spmd_plan_info *info, mt_err *err)
{
    mt_spmd *s = NULL;
    int slots = mt_optim_slots(&spec->optimizer);
    mt_code rc = spmd_plan_new(spec, mesh, map, in_rank, in_shape, global_batch, &s, err);

    mt_spmd_layer_plan *layers = info != NULL ? info->layers : NULL;

    if (rc != MT_OK || info == NULL) {
        mt_spmd_free(s);
        return rc;
    }
    memset(info, 0, sizeof(*info));
    info->layers = layers;
    info->ndims = s->ndims;
    for (int p = 0; p < s->ndev; p++) {
        uint64_t w = 0, sl = 0, ga = 0;
        for (size_t i = 0; i < s->n_params; i++) {
            uint64_t n = shard_elems(s, i, p);
            bool tr = s->gparams[i].trainable;
            w += n * sizeof(float);
            sl += tr ? (uint64_t)slots * n * sizeof(float) : 0;
            if (s->fsdp[i] >= 0 && !s->fsdp_transient)
                ga += (tr ? 2u : 1u) * n * dsz(s, s->bdim) * sizeof(float);
        }
        for (int l = 0; l < s->n_layers && s->fsdp_transient; l++) { /* the largest layer's */
            uint64_t n = 0;
            for (int k = 0; k < MT_LAYER_MAX_PARAMS; k++)
                if (s->layers[l].has[k] && s->fsdp[s->layers[l].pi[k]] >= 0)
                    n += shard_elems(s, s->layers[l].pi[k], p) * dsz(s, s->bdim);
            ga = 2 * n * sizeof(float) > ga ? 2 * n * sizeof(float) : ga;
        }
        info->weight_bytes = w > info->weight_bytes ? w : info->weight_bytes;
        info->slot_bytes = sl > info->slot_bytes ? sl : info->slot_bytes;
        info->gathered_bytes = ga > info->gathered_bytes ? ga : info->gathered_bytes;
    }
    { /* every layer's buffers on one device (the first), counted without allocating */
        dev tmp = {.s = s};
        mt_layer_dev ld = dev_services(&tmp);
        mt_layer_alloc la = {.count_only = true, .invariant = s->inv_leaves > 0};
        mt_layer_state st;
        for (int i = 0; i < s->n_layers; i++) {
            uint64_t before = la.bytes;
            (void)mt_layer_state_init(&s->layers[i], &st, s->max_b, &ld, &la, NULL);
            if (layers != NULL)
                layers[i].activation_bytes = la.bytes - before;
        }
        info->work_bytes = (uint64_t)la.work * sizeof(float);
        info->activation_bytes = la.bytes + info->work_bytes;
    }
    for (int i = 0; layers != NULL && i < s->n_layers; i++) {
        const mt_layer *l = &s->layers[i];
        planner_ctx pc = {s, NULL};
        mt_layer_planner pl = query_planner(&pc);
        snprintf(layers[i].name, sizeof(layers[i].name), "%s", l->s.name);
        snprintf(layers[i].type, sizeof(layers[i].type), "%s", l->ops->type);
        mt_layer_shape_text(layers[i].shape, sizeof(layers[i].shape), l->out_rank, l->out_shape);
        memset(layers[i].comm_bytes, 0, sizeof(layers[i].comm_bytes));
        if (l->ops->comm != NULL)
            l->ops->comm(l, s->max_b, s->bdim, &pl, comm_add, layers[i].comm_bytes);
        for (int k = 0; k < s->ndims; k++)
            layers[i].comm_bytes[k] *= sizeof(float);
    }
    info->n_layers = layers != NULL ? s->n_layers : 0;
    plan_halo(s, info);
    plan_comm(s, info->comm_bytes);
    for (int k = 0; k < s->ndims; k++)
        info->comm_bytes[k] *= sizeof(float);
    mt_spmd_free(s);
    return MT_OK;
}

void mt_spmd_free(mt_spmd *s)
{
    if (s == NULL)
        return;
    if (s->sync_init) {
        bool any = false;
        for (int p = 0; p < s->ndev; p++)
            any = any || s->devs[p].started;
        if (any)
            run_job(s, JOB_QUIT, NULL);
        for (int p = 0; p < s->ndev; p++)
            if (s->devs[p].started)
                pthread_join(s->devs[p].thread, NULL);
    }
    for (int p = 0; s->devs != NULL && p < s->ndev; p++)
        dev_free(&s->devs[p]);
    if (s->sync_init) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv_job);
        pthread_cond_destroy(&s->cv_done);
    }
    mt_coll_world_free(s->own_world);
    mt_free(s->meta_key);
    mt_free(s->meta_text);
    mt_free(s->devs);
    mt_free(s->layers);
    mt_free(s->gparams);
    mt_free(s->playout);
    mt_free(s->ulayout);
    mt_free(s->fsdp);
    mt_free(s->ahead_mine);
    mt_free(s->all_pos);
    mt_free(s);
}

/* The labels or targets the loss reads are there, and every label is in range (before any device
 * starts, so a bad label fails the call cleanly). */
static mt_code check_labels(const mt_spmd *s, const int32_t *labels, const float *targets, size_t n,
                            mt_err *err)
{
    bool tg = mt_loss_uses_targets(&s->loss, targets != NULL ? 1 : 0);
    bool binary = s->loss.kind == MT_LOSS_BINARY_CROSSENTROPY;
    size_t hi = binary ? 2 : s->osh.c;

    if (n > 0 && (tg ? targets == NULL : labels == NULL))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "loss: %s needs the batch's %s",
                          mt_loss_name(s->loss.kind), tg ? "float targets" : "class labels");
    for (size_t i = 0; !tg && i < n * s->ydim; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= hi)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              s->ydim == 1
                                  ? "label %d of example %zu is outside [0, %zu)"
                                  : "label %d of example %zu (row %zu) is outside [0, %zu)",
                              (int)labels[i], i / s->ydim, s->ydim == 1 ? hi : i % s->ydim, hi);
    return MT_OK;
}

/* The step's metrics from the first local device's global sums over n examples. */
static void step_metrics(const mt_spmd *s, size_t n, mt_step_metrics *metrics)
{
    float sums[MT_LOSS_NSUMS];
    if (metrics == NULL)
        return;
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        sums[k] = (float)s->devs[s->first_local].sums[k];
    mt_step_metrics_fill(metrics, &s->loss, &s->osh, sums, n);
}

mt_code mt_spmd_step(mt_spmd *s, const float *x, const int32_t *labels, size_t n, uint64_t step,
                     uint64_t first_example, mt_step_metrics *metrics, mt_err *err)
{
    return mt_spmd_step_targets(s, x, labels, NULL, n, step, first_example, metrics, err);
}

mt_code mt_spmd_step_targets(mt_spmd *s, const float *x, const int32_t *labels,
                             const float *targets, size_t n, uint64_t step, uint64_t first_example,
                             mt_step_metrics *metrics, mt_err *err)
{
    mt_code rc;
    if (n == 0 || n > s->max_gb)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "spmd step: batch of %zu not in 1..%zu", n,
                          s->max_gb);
    if ((rc = check_labels(s, labels, targets, n, err)) != MT_OK)
        return rc;
    s->jx = x;
    s->jy = labels;
    s->jt = targets;
    s->jn = n;
    s->jstep = step;
    s->jfirst = first_example;
    s->jpieces = NULL;
    s->ahead = false;
    rc = run_job(s, JOB_STEP, err);
    if (rc == MT_OK)
        step_metrics(s, n, metrics);
    return rc;
}

mt_code mt_spmd_step_pieces(mt_spmd *s, const mt_spmd_piece *pieces, uint64_t step,
                            size_t *global_count, mt_step_metrics *metrics, mt_err *err)
{
    return mt_spmd_step_pieces_next(s, pieces, NULL, step, global_count, metrics, err);
}

mt_code mt_spmd_step_pieces_next(mt_spmd *s, const mt_spmd_piece *pieces, const size_t *next_n,
                                 uint64_t step, size_t *global_count, mt_step_metrics *metrics,
                                 mt_err *err)
{
    bool ahead = s->ahead && s->ahead_step == step;
    size_t n;
    mt_code rc;

    *global_count = 0;
    s->ahead = false;
    for (int p = 0; p < s->ndev; p++) {
        const mt_spmd_piece *pc;
        int b = mt_spmd_batch_coord(s, p);
        if (s->devs[p].comm == NULL)
            continue;
        pc = &pieces[b];
        if (pc->n > s->max_b || (pc->n > 0 && pc->x == NULL))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "spmd step: piece of %zu examples for device %d (at most %zu)", pc->n,
                              p, s->max_b);
        if (ahead && pc->n != s->ahead_mine[b])
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "spmd step %llu: piece of %zu examples for device %d, but the "
                              "previous step announced %zu",
                              (unsigned long long)step, pc->n, p, s->ahead_mine[b]);
        if (next_n != NULL && next_n[b] > s->max_b)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "spmd step: next piece of %zu examples for device %d (at most %zu)",
                              next_n[b], p, s->max_b);
        if ((rc = check_labels(s, pc->y, pc->t, pc->n, err)) != MT_OK)
            return rc;
    }
    if (ahead && s->ahead_count == 0) /* agreed by the previous step: every replica ran out */
        return mt_err_set(err, MT_OUT_OF_RANGE, "spmd step %llu: every replica is out of data",
                          (unsigned long long)step);
    s->jpieces = pieces;
    s->jnext = next_n;
    s->jahead = ahead;
    s->jstep = step;
    rc = run_job(s, JOB_STEP, err);
    s->jpieces = NULL;
    s->jnext = NULL;
    s->jahead = false;
    if (rc != MT_OK)
        return rc;
    n = s->devs[s->first_local].gcount;
    *global_count = n;
    if (n == 0)
        return mt_err_set(err, MT_OUT_OF_RANGE, "spmd step %llu: every replica is out of data",
                          (unsigned long long)step);
    if (next_n != NULL) {
        s->ahead = true;
        s->ahead_step = step + 1;
        s->ahead_count = s->devs[s->first_local].next;
        for (int b = 0; b < mt_spmd_batch_replicas(s); b++)
            s->ahead_mine[b] = next_n[b];
    }
    step_metrics(s, n, metrics);
    return MT_OK;
}

int mt_spmd_batch_replicas(const mt_spmd *s)
{
    return s->bdim >= 0 ? s->dimsz[s->bdim] : 1;
}

int mt_spmd_batch_coord(const mt_spmd *s, int p)
{
    int coords[MT_MESH_MAX_DIMS];

    if (p < 0 || p >= s->ndev ||
        mt_mesh_coords(s->mesh, mt_mesh_device_at(s->mesh, p), coords, NULL) != MT_OK)
        return -1;
    return s->bdim >= 0 ? coords[s->bdim] : 0;
}

int mt_spmd_batch_dim(const mt_mesh *mesh, const mt_layout_map *map)
{
    const mt_layout *il = mt_layout_map_input(map);

    if (il == NULL)
        return mt_mesh_dim_index(mesh, "batch");
    if (il->rank < 1 || mt_layout_axis_unsharded(il, 0))
        return -1;
    return mt_mesh_dim_index(mesh, il->axes[0]);
}

mt_code mt_spmd_evaluate(mt_spmd *s, const float *x, const int32_t *labels, size_t n,
                         double *loss_sum, size_t *correct, mt_err *err)
{
    double sums[MT_LOSS_NSUMS] = {0};
    mt_code rc = mt_spmd_evaluate_sums(s, x, labels, NULL, n, sums, NULL, err);
    if (rc == MT_OK) {
        *loss_sum += sums[MT_LOSS_SUM_LOSS] / (double)s->ydim;
        *correct += (size_t)sums[MT_LOSS_SUM_CORRECT];
    }
    return rc;
}

mt_code mt_spmd_evaluate_sums(mt_spmd *s, const float *x, const int32_t *labels,
                              const float *targets, size_t n, double *sums, double *hist,
                              mt_err *err)
{
    const dev *d;
    mt_code rc;
    if (n == 0)
        return MT_OK;
    if ((rc = check_labels(s, labels, targets, n, err)) != MT_OK)
        return rc;
    s->jx = x;
    s->jy = labels;
    s->jt = targets;
    s->jn = n;
    s->jstep = UINT64_MAX / 2 + s->nevals++; /* a tag distinct from every training step */
    rc = run_job(s, JOB_EVAL, err);
    if (rc != MT_OK)
        return rc;
    d = &s->devs[s->first_local];
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        sums[k] += d->sums[k];
    for (int k = 0; hist != NULL && d->hist != NULL && k < 2 * MT_LOSS_AUC_BINS; k++)
        hist[k] += d->hist[k];
    return MT_OK;
}

mt_loss_shape mt_spmd_output_shape(const mt_spmd *s)
{
    return s->osh;
}

mt_code mt_spmd_check_data(const mt_spmd *s, size_t y_dim, size_t t_dim, mt_err *err)
{
    return mt_loss_check(&s->loss, &s->osh, y_dim, t_dim, err);
}

size_t mt_spmd_param_count(const mt_spmd *s)
{
    return s->n_params;
}

const mt_model_param *mt_spmd_param(const mt_spmd *s, int p, size_t i)
{
    if (p < 0 || p >= s->ndev || i >= s->n_params || s->devs[p].comm == NULL)
        return NULL;
    return &s->devs[p].params[i];
}

const mt_layout *mt_spmd_param_layout(const mt_spmd *s, size_t i)
{
    return i < s->n_params ? &s->playout[i] : NULL;
}

int64_t mt_spmd_iterations(const mt_spmd *s)
{
    return s->devs[s->first_local].t;
}

size_t mt_spmd_param_bytes(const mt_spmd *s, int p, size_t i)
{
    const mt_model_param *q = mt_spmd_param(s, p, i);
    size_t n;
    if (q == NULL)
        return 0;
    n = 1 + (q->grad != NULL) + (q->slot1 != NULL) + (q->slot2 != NULL);
    if (s->fsdp[i] >= 0 && !s->fsdp_transient) /* the kept gathered value and whole gradient */
        n += (1 + (q->grad != NULL)) * dsz(s, s->bdim);
    return n * q->size * sizeof(float);
}

/* Copy a shard (local_shape at offsets of a global row-major tensor) into / out of global. */
static void shard_copy(float *global, float *local, const mt_model_param *p, bool to_global)
{
    size_t rows = 1, inner = p->local_shape[p->rank - 1];
    for (int a = 0; a < p->rank - 1; a++)
        rows *= p->local_shape[a];
    for (size_t r = 0; r < rows; r++) {
        size_t rem = r, goff = 0, stride = 1;
        for (int a = p->rank - 1; a >= 0; a--) {
            size_t idx = a == p->rank - 1 ? p->offsets[a] : p->offsets[a] + rem % p->local_shape[a];
            if (a != p->rank - 1)
                rem /= p->local_shape[a];
            goff += idx * stride;
            stride *= p->shape[a];
        }
        if (to_global)
            memcpy(global + goff, local + r * inner, inner * sizeof(float));
        else
            memcpy(local + r * inner, global + goff, inner * sizeof(float));
    }
}

mt_code mt_spmd_param_gather(const mt_spmd *s, const char *name, float *out, mt_err *err)
{
    for (size_t i = 0; i < s->n_params; i++) {
        if (strcmp(s->gparams[i].name, name) != 0)
            continue;
        for (int p = 0; p < s->ndev; p++)
            if (s->devs[p].comm != NULL)
                shard_copy(out, s->devs[p].params[i].value, &s->devs[p].params[i], true);
        return MT_OK;
    }
    return mt_err_set(err, MT_NOT_FOUND, "parameter '%s' not in the model", name);
}

/* ------------------------------------------------------------------ checkpoints */

static const char *slot_name(const mt_spmd *s, int k)
{
    return mt_optim_slot_name(&s->opt, k);
}

static float *slot_of(mt_model_param *p, int k)
{
    return k < 0 ? p->value : k == 0 ? p->slot1 : p->slot2;
}

/* The checkpoint name of parameter i (k < 0) or of its optimizer slot k ("<param>/adam_m"). */
static void tensor_name(const mt_spmd *s, size_t i, int k, char *buf, size_t n)
{
    if (k < 0)
        snprintf(buf, n, "%s", s->gparams[i].name);
    else
        snprintf(buf, n, "%s/%s", s->gparams[i].name, slot_name(s, k));
}

/* Whether the checkpoint holds slot k (>= 0) of parameter i (trainable, the optimizer has it). */
static bool has_slot(const mt_spmd *s, size_t i, int k)
{
    return s->gparams[i].trainable && slot_of(&s->devs[s->first_local].params[i], k) != NULL;
}

/*
 * The core/digest tensor digest of parameter i (k < 0) or its slot k as this process's devices
 * hold it: every local device's shard; elements none of them holds come from fill (NULL: fail).
 */
static mt_code param_digest(const mt_spmd *s, size_t i, int k, mt_digest_fill_fn fill, void *fctx,
                            mt_digest *out, mt_err *err)
{
    const mt_model_param *g = &s->gparams[i];
    char name[MT_CKPT_MAX_NAME];
    int64_t shape[MT_DIGEST_MAX_RANK];
    int64_t(*of)[MT_DIGEST_MAX_RANK] = mt_calloc((size_t)s->ndev, sizeof(*of));
    int64_t(*ls)[MT_DIGEST_MAX_RANK] = mt_calloc((size_t)s->ndev, sizeof(*ls));
    mt_digest_shard *sh = mt_calloc((size_t)s->ndev, sizeof(*sh));
    mt_digest_tensor_desc d = {name, "F32", sizeof(float), g->rank, shape};
    int n = 0;
    mt_code rc;

    tensor_name(s, i, k, name, sizeof(name));
    if (of == NULL || ls == NULL || sh == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest of '%s': out of memory", name);
        goto out;
    }
    for (int a = 0; a < g->rank; a++)
        shape[a] = (int64_t)g->shape[a];
    for (int p = 0; p < s->ndev; p++) {
        mt_model_param *q = &s->devs[p].params[i];
        if (s->devs[p].comm == NULL)
            continue;
        for (int a = 0; a < q->rank; a++) {
            of[n][a] = (int64_t)q->offsets[a];
            ls[n][a] = (int64_t)q->local_shape[a];
        }
        sh[n].data = slot_of(q, k);
        sh[n].offsets = of[n];
        sh[n].local_shape = ls[n];
        n++;
    }
    rc = mt_digest_tensor(&d, sh, n, fill, fctx, out, err);
out:
    mt_free(of);
    mt_free(ls);
    mt_free(sh);
    return rc;
}

/*
 * Host-side work between steps shows as every local device's activity (hang diagnosis): the
 * device threads are idle then, and the progress slot's mutex makes the write safe.
 */
static void host_activity(mt_spmd *s, const char *what)
{
    for (int p = 0; p < s->ndev; p++)
        mt_coll_comm_activity(s->devs[p].comm, what); /* NULL comm (remote device): no-op */
}

mt_code mt_spmd_set_meta(mt_spmd *s, const char *key, const char *text, mt_err *err)
{
    char *k = mt_malloc(strlen(MT_CKPT_META_PREFIX) + strlen(key) + 1), *t = mt_strdup(text);

    if (k == NULL || t == NULL) {
        mt_free(k);
        mt_free(t);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "checkpoint metadata: out of memory");
    }
    memcpy(k, MT_CKPT_META_PREFIX, strlen(MT_CKPT_META_PREFIX));
    memcpy(k + strlen(MT_CKPT_META_PREFIX), key, strlen(key) + 1);
    mt_free(s->meta_key);
    mt_free(s->meta_text);
    s->meta_key = k;
    s->meta_text = t;
    return MT_OK;
}

/* The text metadata tensors: mt_spmd_set_meta's, when there is one, and the position's
 * validation bookkeeping, when it has one. */
static mt_code write_meta(const mt_spmd *s, const mt_spmd_position *pos, mt_ckpt_writer *w,
                          mt_err *err)
{
    int64_t len = s->meta_text != NULL ? (int64_t)strlen(s->meta_text) : 0;
    mt_code rc = MT_OK;

    if (s->meta_key != NULL)
        rc = mt_ckpt_writer_add(w, s->meta_key, MT_CKPT_U8, &len, 1, s->meta_text, err);
    if (rc != MT_OK || pos == NULL || pos->val[0] == '\0')
        return rc;
    len = (int64_t)strlen(pos->val);
    return mt_ckpt_writer_add(w, MT_SPMD_VAL_META, MT_CKPT_U8, &len, 1, pos->val, err);
}

/* The validation bookkeeping a checkpoint carries (MT_SPMD_VAL_META) into out, or "". */
static void read_val_meta(const mt_ckpt *ck, char *out, size_t cap)
{
    mt_ckpt_tensor_info info;

    out[0] = '\0';
    if (mt_ckpt_find(ck, MT_SPMD_VAL_META, &info, NULL) != MT_OK || info.dtype != MT_CKPT_U8 ||
        info.nbytes >= cap || mt_ckpt_read(ck, MT_SPMD_VAL_META, out, cap - 1, NULL) != MT_OK)
        out[0] = '\0';
    else
        out[info.nbytes] = '\0';
}

/*
 * After sharded updates each replica's slots are current only in its own chunk: make them whole
 * on every device before they are read (a checkpoint, a digest). COLLECTIVE over the world when
 * it spreads over processes (the callers that pass `collective` are: every process calls them
 * at the same point); a process alone in its world runs it for all. FAILED_PRECONDITION when a
 * caller of this process alone needs it in a world spread over processes.
 */
#define SLOTS_TAG (1ULL << 40) /* zero_sync's own step space, as SAVE_TAG and AGREE_TAG */
static mt_code zero_sync(mt_spmd *s, bool collective, mt_err *err)
{
    bool stale = false;
    for (int p = 0; p < s->ndev; p++)
        stale = stale || (s->devs[p].comm != NULL && s->devs[p].slots_stale);
    if (!stale)
        return MT_OK;
    if (!collective && s->nlocal < s->ndev)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "optimizer slots: the replicas' sharded update leaves each process a "
                          "chunk of them; save or digest with every process "
                          "(mt_spmd_save_gathered, mt_spmd_digest_world)");
    s->jcall = (mt_coll_call){SLOTS_TAG + s->nsyncs++, 0, 0};
    return run_job(s, JOB_SLOTS, err);
}

void mt_spmd_set_sharded_update(mt_spmd *s, bool on)
{
    s->zero = on && s->zero_ok;
}

bool mt_spmd_sharded_update(const mt_spmd *s)
{
    return s->zero;
}

bool mt_spmd_rows_in_place(const mt_spmd *s)
{
    return s->fdim0 < 0 && s->input_read_only;
}

mt_code mt_spmd_save(mt_spmd *s, const char *path, const mt_spmd_position *pos,
                     const char *spec_json, mt_err *err)
{
    mt_ckpt_writer *w = NULL;
    mt_code rc = zero_sync(s, false, err);
    int64_t one = 1, t = s->devs[s->first_local].t;

    if (rc != MT_OK)
        return rc;
    rc = mt_ckpt_writer_open(path, &w, err);
    host_activity(s, "host: writing a checkpoint");
    if (rc != MT_OK)
        return rc;
    if (pos != NULL)
        mt_ckpt_writer_set_position(w, pos->step, pos->epoch, pos->input_position);
    if (spec_json != NULL && (rc = mt_ckpt_writer_set_spec(w, spec_json, err)) != MT_OK)
        goto fail;
    for (size_t i = 0; i < s->n_params; i++) {
        const mt_model_param *g = &s->gparams[i];
        int64_t shape[4];
        for (int a = 0; a < g->rank; a++)
            shape[a] = (int64_t)g->shape[a];
        for (int k = -1; k < 2; k++) {
            char name[MT_CKPT_MAX_NAME];
            if (k >= 0 && !has_slot(s, i, k))
                continue;
            tensor_name(s, i, k, name, sizeof(name));
            rc = mt_ckpt_writer_begin(w, name, MT_CKPT_F32, shape, g->rank, err);
            for (int p = 0; rc == MT_OK && p < s->ndev; p++) {
                mt_model_param *q = &s->devs[p].params[i];
                if (s->devs[p].comm == NULL)
                    continue;
                int64_t of[4], ls[4];
                for (int a = 0; a < q->rank; a++) {
                    of[a] = (int64_t)q->offsets[a];
                    ls[a] = (int64_t)q->local_shape[a];
                }
                rc = mt_ckpt_writer_put_slice(w, of, ls, slot_of(q, k), err);
            }
            if (rc == MT_OK)
                rc = mt_ckpt_writer_end(w, err);
            if (rc != MT_OK)
                goto fail;
        }
    }
    rc = mt_ckpt_writer_add(w, "optimizer/iterations", MT_CKPT_I64, &one, 1, &t, err);
    if (rc == MT_OK)
        rc = write_meta(s, pos, w, err);
    if (rc != MT_OK)
        goto fail;
    return mt_ckpt_writer_commit(w, err);
fail:
    mt_ckpt_writer_abort(w);
    return rc;
}

/* The digest of "optimizer/iterations" (I64, shape (1)) holding t, as mt_spmd_save writes it. */
static mt_code iterations_digest(int64_t t, mt_digest *out, mt_err *err)
{
    int64_t one = 1;
    mt_digest_tensor_desc d = {"optimizer/iterations", "I64", sizeof(int64_t), 1, &one};
    return mt_digest_tensor_whole(&d, &t, out, err);
}

/*
 * The restore check: the digest of what this process's devices loaded (elements none of them
 * holds, shards living in other processes, read from the file) must equal the one the writer
 * recorded, else DATA_LOSS naming the tensor.
 */
static mt_code verify_loaded(const mt_spmd *s, const mt_ckpt *ck, size_t i, int k, const char *name,
                             const mt_digest *recorded, const char *path, mt_err *err)
{
    mt_ckpt_fill_ctx f = {ck, name};
    mt_digest d;
    char a[MT_DIGEST_HEX], b[MT_DIGEST_HEX];
    mt_code rc = param_digest(s, i, k, mt_ckpt_digest_fill, &f, &d, err);

    if (rc != MT_OK)
        return rc;
    if (!mt_digest_equal(&d, recorded))
        return mt_err_set(err, MT_DATA_LOSS,
                          "checkpoint %s: tensor '%s': the Merkle digest of what the devices "
                          "loaded (%.16s...) differs from the recorded one (%.16s...)",
                          path, name, mt_digest_hex(&d, a), mt_digest_hex(recorded, b));
    return MT_OK;
}

/* The restore check of the iteration count (read whole). */
static mt_code verify_iterations(const mt_ckpt *ck, int64_t t, const char *path, mt_err *err)
{
    mt_ckpt_tensor_info info;
    mt_digest d;
    mt_code rc = mt_ckpt_find(ck, "optimizer/iterations", &info, err);

    if (rc == MT_OK && info.has_digest && (rc = iterations_digest(t, &d, err)) == MT_OK &&
        !mt_digest_equal(&d, &info.digest))
        rc = mt_err_set(err, MT_DATA_LOSS,
                        "checkpoint %s: tensor 'optimizer/iterations': the Merkle digest of the "
                        "loaded value differs from the recorded one",
                        path);
    return rc;
}

static mt_code restore_tensor(mt_spmd *s, const mt_ckpt *ck, size_t i, int k, const char *path,
                              mt_err *err)
{
    const mt_model_param *g = &s->gparams[i];
    char name[MT_CKPT_MAX_NAME];
    mt_ckpt_tensor_info info;
    mt_code rc;

    tensor_name(s, i, k, name, sizeof(name));
    if (mt_ckpt_find(ck, name, &info, NULL) != MT_OK)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "checkpoint %s: no tensor '%s' (another model or optimizer?)", path,
                          name);
    if (info.dtype != MT_CKPT_F32 || info.rank != g->rank)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "checkpoint %s: tensor '%s' has rank %d",
                          path, name, info.rank);
    for (int a = 0; a < g->rank; a++)
        if (info.shape[a] != (int64_t)g->shape[a])
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "checkpoint %s: tensor '%s' axis %d is %lld, the model has %zu", path,
                              name, a, (long long)info.shape[a], g->shape[a]);
    for (int p = 0; p < s->ndev; p++) {
        mt_model_param *q = &s->devs[p].params[i];
        int64_t of[4], ls[4];
        if (s->devs[p].comm == NULL)
            continue;
        for (int a = 0; a < q->rank; a++) {
            of[a] = (int64_t)q->offsets[a];
            ls[a] = (int64_t)q->local_shape[a];
        }
        rc = mt_ckpt_read_slice(ck, name, of, ls, slot_of(q, k), err);
        if (rc != MT_OK)
            return rc;
    }
    return info.has_digest ? verify_loaded(s, ck, i, k, name, &info.digest, path, err) : MT_OK;
}

mt_code mt_spmd_restore(mt_spmd *s, const char *path, mt_spmd_position *pos, mt_err *err)
{
    mt_ckpt *ck = NULL;
    int64_t t = 0;
    mt_code rc = mt_ckpt_open(path, &ck, err);

    if (rc != MT_OK)
        return rc;
    s->ahead = false;
    host_activity(s, "host: restoring a checkpoint");
    for (size_t i = 0; rc == MT_OK && i < s->n_params; i++) {
        rc = restore_tensor(s, ck, i, -1, path, err);
        for (int k = 0; rc == MT_OK && k < 2; k++)
            if (has_slot(s, i, k))
                rc = restore_tensor(s, ck, i, k, path, err);
    }
    if (rc == MT_OK && mt_ckpt_read(ck, "optimizer/iterations", &t, sizeof(t), NULL) != MT_OK)
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "checkpoint %s: no tensor 'optimizer/iterations'", path);
    if (rc == MT_OK)
        rc = verify_iterations(ck, t, path, err);
    for (int p = 0; p < s->ndev; p++)
        s->devs[p].wstale = true; /* FSDP copies are allgathered again before the next use */
    if (rc == MT_OK) {
        for (int p = 0; p < s->ndev; p++) {
            s->devs[p].t = t;
            s->devs[p].slots_stale = false; /* every device read its slots whole */
        }
        if (pos != NULL) {
            pos->step = mt_ckpt_step(ck);
            pos->epoch = mt_ckpt_epoch(ck);
            pos->input_position = mt_ckpt_input_position(ck);
            read_val_meta(ck, pos->val, sizeof(pos->val));
        }
    }
    mt_ckpt_close(ck);
    return rc;
}

mt_code mt_spmd_digest(mt_spmd *s, mt_digest *out, mt_err *err)
{
    size_t cap = 3 * s->n_params + 1;
    char **names = mt_calloc(cap, sizeof(*names));
    mt_digest *d = mt_calloc(cap, sizeof(*d));
    mt_code rc = zero_sync(s, false, err);
    int n = 0;

    if (rc == MT_OK && (names == NULL || d == NULL))
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    for (size_t i = 0; rc == MT_OK && i < s->n_params; i++)
        for (int k = -1; rc == MT_OK && k < 2; k++) {
            if (k >= 0 && !has_slot(s, i, k))
                continue;
            if ((names[n] = mt_malloc(MT_CKPT_MAX_NAME)) == NULL) {
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
                break;
            }
            tensor_name(s, i, k, names[n], MT_CKPT_MAX_NAME);
            rc = param_digest(s, i, k, NULL, NULL, &d[n], err);
            n++;
        }
    if (rc == MT_OK && (names[n] = mt_strdup("optimizer/iterations")) == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    if (rc == MT_OK)
        rc = iterations_digest(s->devs[s->first_local].t, &d[n++], err);
    if (rc == MT_OK)
        rc = mt_digest_root((const char *const *)names, d, n, out, err);
    for (size_t i = 0; names != NULL && i < cap; i++)
        mt_free(names[i]);
    mt_free(names);
    mt_free(d);
    return rc;
}

/* ------------------------------------------------------------------ multi-process checkpoints */

/*
 * DESIGN. In a world spread over processes only the process holding rank 0 writes, and its
 * devices may hold only some shards of a tensor (a layout naming a dimension that crosses
 * processes). mt_spmd_save_gathered moves them there over the collectives, tensor by tensor:
 * the gather group of a sharded tensor is the set of positions whose coordinate is 0 along every
 * mesh dimension its layout does not name (one holder per distinct shard, position 0 among them,
 * in ascending position order); its members allgather their shards (all the same size: layouts
 * divide evenly) into a buffer of the global size, the writer copies device 0's buffer slice by
 * slice into the checkpoint writer, and every buffer is freed before the next tensor. Replicated
 * tensors move nothing (device 0 holds them whole). The collectives are tagged with their own
 * step space (SAVE_TAG + save number, one seq per tensor; AGREE_TAG + agreement number), far from
 * training steps, so they can never be confused with a step's collectives.
 */
#define SAVE_TAG  (1ULL << 38)
#define AGREE_TAG (1ULL << 39)

/* A member of the gather group allgathers its shard of (jgi, jgk) into d->gbuf. */
static mt_code dev_gather(dev *d)
{
    mt_spmd *s = d->s;
    mt_model_param *q = &d->params[s->jgi];
    mt_coll_group g = {s->jgroup, s->jgn};
    bool member = false;

    for (int j = 0; j < s->jgn; j++)
        member = member || s->jgroup[j] == d->pos;
    if (!member)
        return MT_OK;
    d->gbuf = mt_malloc(q->size * (size_t)s->jgn * sizeof(float) + 1);
    if (d->gbuf == NULL)
        return mt_err_set(&d->err, MT_RESOURCE_EXHAUSTED,
                          "checkpoint gather of '%s': out of memory", q->name);
    return mt_coll_allgather(d->comm, &g, slot_of(q, s->jgk), d->gbuf, q->size, &s->jcall, &d->err);
}

/* Every device adds this process's flag over the whole world. */
static mt_code dev_agree(dev *d)
{
    mt_spmd *s = d->s;
    mt_coll_group g = {s->jgroup, s->ndev};

    d->flag = s->jflag;
    return mt_coll_allreduce_sum(d->comm, &g, &d->flag, 1, &s->jcall, &d->err);
}

bool mt_spmd_save_needs_gather(const mt_spmd *s)
{
    if (s->nlocal == s->ndev)
        return false;
    if (s->zero) /* the optimizer slots: each replica keeps its chunk current (zero_sync) */
        return true;
    for (size_t i = 0; i < s->n_params; i++)
        if (!mt_layout_is_replicated(&s->playout[i]))
            return true;
    return false;
}

/* The gather group of parameter i into grp (ndev ints); its size. */
static mt_code gather_group(const mt_spmd *s, size_t i, int *grp, int *n, mt_err *err)
{
    int rd[MT_MESH_MAX_DIMS], nrd = mt_layout_replicated_dims(&s->playout[i], s->mesh, rd);

    *n = 0;
    for (int p = 0; p < s->ndev; p++) {
        int c[MT_MESH_MAX_DIMS];
        bool in = true;
        mt_code rc = mt_mesh_coords(s->mesh, mt_mesh_device_at(s->mesh, p), c, err);
        if (rc != MT_OK)
            return rc;
        for (int k = 0; k < nrd; k++)
            in = in && c[rd[k]] == 0;
        if (in)
            grp[(*n)++] = p;
    }
    return MT_OK;
}

/*
 * Visitor of one gathered tensor on the process holding rank 0: parameter i (k < 0) or its slot
 * k, held as n shards — device 0's gather buffer (the shards of grp[0..n), in that order) when
 * n > 1, else device 0's own replica.
 */
typedef mt_code (*gathered_fn)(mt_spmd *s, void *ctx, size_t i, int k, const int *grp, int n,
                               mt_err *err);

/* Shard j of the n that device 0 holds of (i, k) after a gather: data, global offsets, shape. */
static mt_code gathered_shard(mt_spmd *s, size_t i, int k, const int *grp, int n, int j,
                              int64_t *of, int64_t *ls, const float **data, mt_err *err)
{
    const mt_model_param *g = &s->gparams[i];
    mt_model_param *q = &s->devs[0].params[i];
    int64_t shape[4];

    for (int a = 0; a < g->rank; a++)
        shape[a] = (int64_t)g->shape[a];
    *data = n > 1 ? s->devs[0].gbuf + (size_t)j * q->size : slot_of(q, k);
    return mt_layout_shard(&s->playout[i], s->mesh, shape, mt_mesh_device_at(s->mesh, grp[j]), ls,
                           of, err);
}

/* Writer side of one tensor (a gathered_fn; ctx the checkpoint writer). */
static mt_code write_gathered(mt_spmd *s, void *ctx, size_t i, int k, const int *grp, int n,
                              mt_err *err)
{
    const mt_model_param *g = &s->gparams[i];
    mt_ckpt_writer *w = ctx;
    char name[MT_CKPT_MAX_NAME];
    int64_t shape[4], of[4], ls[4];
    mt_code rc;

    for (int a = 0; a < g->rank; a++)
        shape[a] = (int64_t)g->shape[a];
    tensor_name(s, i, k, name, sizeof(name));
    rc = mt_ckpt_writer_begin(w, name, MT_CKPT_F32, shape, g->rank, err);
    for (int j = 0; rc == MT_OK && j < n; j++) {
        const float *src;
        rc = gathered_shard(s, i, k, grp, n, j, of, ls, &src, err);
        if (rc == MT_OK)
            rc = mt_ckpt_writer_put_slice(w, of, ls, src, err);
    }
    return rc == MT_OK ? mt_ckpt_writer_end(w, err) : rc;
}

/*
 * Every process of the world: for each tensor of the checkpoint (weights, then their optimizer
 * slots), the holders of its distinct shards allgather them to device 0 (tags SAVE_TAG + the
 * save number), and the process holding rank 0 (writer) hands the tensor to fn. A failure of fn
 * (*frc, *ferr) stops the visits but not this process's part in the gathers, so the others
 * finish. Returns the collectives' code.
 */
static mt_code gather_each(mt_spmd *s, bool writer, gathered_fn fn, void *ctx, mt_code *frc,
                           mt_err *ferr, mt_err *err)
{
    uint64_t tag = SAVE_TAG + s->nsaves++;
    uint32_t seq = 0;
    int *grp = mt_calloc((size_t)s->ndev, sizeof(int));
    mt_code rc = MT_OK;

    if (grp == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "state gather: out of memory");
    rc = zero_sync(s, true, err);
    for (size_t i = 0; rc == MT_OK && i < s->n_params; i++) {
        int n = 0;
        rc = gather_group(s, i, grp, &n, err);
        for (int k = -1; rc == MT_OK && k < 2; k++) {
            if (k >= 0 && (!s->gparams[i].trainable ||
                           slot_of(&s->devs[s->first_local].params[i], k) == NULL))
                continue;
            if (n > 1) {
                s->jgi = i, s->jgk = k, s->jgroup = grp, s->jgn = n;
                s->jcall = (mt_coll_call){tag, seq++, 0};
                rc = run_job(s, JOB_GATHER, err);
            }
            if (rc == MT_OK && writer && *frc == MT_OK)
                *frc = fn(s, ctx, i, k, grp, n, ferr);
            for (int p = 0; p < s->ndev; p++) {
                mt_free(s->devs[p].gbuf);
                s->devs[p].gbuf = NULL;
            }
        }
    }
    mt_free(grp);
    return rc;
}

mt_code mt_spmd_save_gathered(mt_spmd *s, const char *path, const mt_spmd_position *pos,
                              const char *spec_json, mt_err *err)
{
    bool writer = s->devs[0].comm != NULL;
    mt_ckpt_writer *w = NULL;
    mt_err werr = MT_ERR_INIT;
    mt_code rc = MT_OK, wrc = MT_OK; /* collectives; this process's writing */
    int64_t one = 1, t = s->devs[s->first_local].t;

    if (writer && path == NULL)
        wrc = mt_err_set(&werr, MT_INVALID_ARGUMENT, "checkpoint gather: no path on the writer");
    if (writer && wrc == MT_OK)
        wrc = mt_ckpt_writer_open(path, &w, &werr);
    if (w != NULL && pos != NULL)
        mt_ckpt_writer_set_position(w, pos->step, pos->epoch, pos->input_position);
    if (w != NULL && spec_json != NULL)
        wrc = mt_ckpt_writer_set_spec(w, spec_json, &werr);
    /* a failed write keeps taking part in the gathers so that the other processes finish */
    rc = gather_each(s, writer, write_gathered, w, &wrc, &werr, err);
    if (rc == MT_OK && w != NULL && wrc == MT_OK)
        wrc = mt_ckpt_writer_add(w, "optimizer/iterations", MT_CKPT_I64, &one, 1, &t, &werr);
    if (rc == MT_OK && w != NULL && wrc == MT_OK)
        wrc = write_meta(s, pos, w, &werr);
    if (rc == MT_OK && w != NULL && wrc == MT_OK) {
        wrc = mt_ckpt_writer_commit(w, &werr); /* releases w */
        w = NULL;
    }
    mt_ckpt_writer_abort(w);
    if (rc != MT_OK)
        return rc;
    return wrc == MT_OK ? MT_OK : mt_err_set(err, wrc, "%s", werr.msg);
}

/* The tensor digests of a gathered state, in visiting order (mt_spmd_digest_world). */
typedef struct digest_acc {
    char **names;
    mt_digest *d;
    int n;
} digest_acc;

/* Digest side of one tensor (a gathered_fn; ctx a digest_acc). */
static mt_code digest_gathered(mt_spmd *s, void *ctx, size_t i, int k, const int *grp, int n,
                               mt_err *err)
{
    const mt_model_param *g = &s->gparams[i];
    digest_acc *a = ctx;
    int64_t shape[MT_DIGEST_MAX_RANK];
    int64_t(*of)[4] = mt_calloc((size_t)n, sizeof(*of));
    int64_t(*ls)[4] = mt_calloc((size_t)n, sizeof(*ls));
    mt_digest_shard *sh = mt_calloc((size_t)n, sizeof(*sh));
    mt_digest_tensor_desc desc = {NULL, "F32", sizeof(float), g->rank, shape};
    mt_code rc = MT_OK;

    if (of == NULL || ls == NULL || sh == NULL ||
        (a->names[a->n] = mt_malloc(MT_CKPT_MAX_NAME)) == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest of '%s': out of memory", g->name);
    if (rc == MT_OK) {
        tensor_name(s, i, k, a->names[a->n], MT_CKPT_MAX_NAME);
        desc.name = a->names[a->n];
        for (int d = 0; d < g->rank; d++)
            shape[d] = (int64_t)g->shape[d];
    }
    for (int j = 0; rc == MT_OK && j < n; j++) {
        const float *src;
        rc = gathered_shard(s, i, k, grp, n, j, of[j], ls[j], &src, err);
        sh[j] = (mt_digest_shard){src, of[j], ls[j]};
    }
    if (rc == MT_OK)
        rc = mt_digest_tensor(&desc, sh, n, NULL, NULL, &a->d[a->n++], err);
    mt_free(of);
    mt_free(ls);
    mt_free(sh);
    return rc;
}

/* ------------------------------------------------------------------ digests shared by replicas */

/*
 * DESIGN. When every device holds every tensor whole (replicated layouts) and there are several
 * devices, hashing the state on one of them leaves the others idle (with a replica per process,
 * the other processes wait at the next step's collectives). A digest's leaves are independent, so
 * the devices share them out: the leaves of the tensors in mt_spmd_digest's visiting order form
 * one list of L leaves, device p hashes leaves [L·p/ndev, L·(p+1)/ndev) of its own replica on its
 * own thread, the devices allgather their leaf digests (32 bytes each, carried as 8 floats: an
 * allgather only copies), and the process holding rank 0 builds each tensor's tree and the root
 * from them (mt_digest_tensor_from_leaves): mt_spmd_digest's result, bit for bit. Tagged
 * DIGEST_TAG + digest number, its own step space as SAVE_TAG's.
 */
#define DIGEST_TAG  (1ULL << 41)
#define LEAF_FLOATS (MT_DIGEST_SIZE / sizeof(float))

typedef struct digest_plan {
    int n;                                /* tensors */
    size_t *param;                        /* per tensor: the parameter */
    int *slot;                            /* -1 its value, else its optimizer slot */
    char (*names)[MT_CKPT_MAX_NAME];      /* checkpoint names */
    int64_t (*shape)[MT_DIGEST_MAX_RANK]; /* global shapes */
    uint64_t *first;                      /* first leaf of tensor j in the list; first[n] = L */
    uint64_t per;                         /* the largest device's share: the allgather's unit */
} digest_plan;

/* Device p's leaves of the plan's list: [*lo, *hi). */
static void leaf_share(const mt_spmd *s, const digest_plan *pl, int p, uint64_t *lo, uint64_t *hi)
{
    uint64_t L = pl->first[pl->n];
    *lo = L * (uint64_t)p / (uint64_t)s->ndev;
    *hi = L * (uint64_t)(p + 1) / (uint64_t)s->ndev;
}

static void plan_free(digest_plan *pl)
{
    mt_free(pl->param);
    mt_free(pl->slot);
    mt_free(pl->names);
    mt_free(pl->shape);
    mt_free(pl->first);
}

static mt_digest_tensor_desc plan_desc(const mt_spmd *s, const digest_plan *pl, int j)
{
    return (mt_digest_tensor_desc){pl->names[j], "F32", sizeof(float),
                                   s->gparams[pl->param[j]].rank, pl->shape[j]};
}

static mt_code plan_make(const mt_spmd *s, digest_plan *pl, mt_err *err)
{
    size_t cap = 3 * s->n_params;
    mt_code rc = MT_OK;

    memset(pl, 0, sizeof(*pl));
    pl->param = mt_calloc(cap + 1, sizeof(*pl->param));
    pl->slot = mt_calloc(cap + 1, sizeof(*pl->slot));
    pl->names = mt_calloc(cap + 1, sizeof(*pl->names));
    pl->shape = mt_calloc(cap + 1, sizeof(*pl->shape));
    pl->first = mt_calloc(cap + 1, sizeof(*pl->first));
    if (pl->param == NULL || pl->slot == NULL || pl->names == NULL || pl->shape == NULL ||
        pl->first == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    for (size_t i = 0; rc == MT_OK && i < s->n_params; i++)
        for (int k = -1; rc == MT_OK && k < 2; k++) {
            int j = pl->n;
            uint64_t nl = 0;
            mt_digest_tensor_desc t;
            if (k >= 0 && !has_slot(s, i, k))
                continue;
            pl->param[j] = i, pl->slot[j] = k;
            tensor_name(s, i, k, pl->names[j], MT_CKPT_MAX_NAME);
            for (int a = 0; a < s->gparams[i].rank; a++)
                pl->shape[j][a] = (int64_t)s->gparams[i].shape[a];
            t = plan_desc(s, pl, j);
            rc = mt_digest_leaf_count(&t, &nl, err);
            pl->first[j + 1] = pl->first[j] + nl;
            pl->n++;
        }
    for (int p = 0; rc == MT_OK && p < s->ndev; p++) {
        uint64_t lo, hi;
        leaf_share(s, pl, p, &lo, &hi);
        pl->per = hi - lo > pl->per ? hi - lo : pl->per;
    }
    return rc;
}

/* A device hashes its share of the plan's leaves from its replica; the devices allgather them into
 * d->gbuf (ndev × per leaves, in position order). */
static mt_code dev_digest(dev *d)
{
    mt_spmd *s = d->s;
    const digest_plan *pl = s->jdg;
    uint64_t lo, hi;
    size_t nf = (size_t)pl->per * LEAF_FLOATS;
    float *mine = mt_calloc(nf + 1, sizeof(float));
    mt_coll_group g = {s->jgroup, s->ndev};
    mt_code rc = MT_OK;

    leaf_share(s, pl, d->pos, &lo, &hi);
    d->gbuf = mt_malloc((nf * (size_t)s->ndev + 1) * sizeof(float));
    if (mine == NULL || d->gbuf == NULL)
        rc = mt_err_set(&d->err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    for (int j = 0; rc == MT_OK && j < pl->n; j++) {
        uint64_t a = lo > pl->first[j] ? lo : pl->first[j];
        uint64_t b = hi < pl->first[j + 1] ? hi : pl->first[j + 1];
        int64_t zero[MT_DIGEST_MAX_RANK] = {0};
        mt_digest_tensor_desc t = plan_desc(s, pl, j);
        mt_digest_shard sh = {slot_of(&d->params[pl->param[j]], pl->slot[j]), zero, pl->shape[j]};
        if (a < b)
            rc = mt_digest_leaves(&t, &sh, 1, NULL, NULL, a - pl->first[j], b - a,
                                  (mt_digest *)mine + (a - lo), &d->err);
    }
    if (rc == MT_OK)
        rc = mt_coll_allgather(d->comm, &g, mine, d->gbuf, nf, &s->jcall, &d->err);
    mt_free(mine);
    return rc;
}

/* Every leaf of the plan in list order from device 0's gathered buffer, then the tensor digests
 * and the root (the process holding rank 0). */
static mt_code digest_from_leaves(mt_spmd *s, const digest_plan *pl, mt_digest *out, mt_err *err)
{
    uint64_t L = pl->first[pl->n];
    const mt_digest *got = (const mt_digest *)s->devs[0].gbuf;
    mt_digest *leaves = mt_calloc(L + 1, sizeof(*leaves)), *d = mt_calloc(pl->n + 1, sizeof(*d));
    const char **names = mt_calloc(pl->n + 1, sizeof(*names));
    mt_code rc = MT_OK;

    if (leaves == NULL || d == NULL || names == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    for (int p = 0; rc == MT_OK && p < s->ndev; p++) {
        uint64_t lo, hi;
        leaf_share(s, pl, p, &lo, &hi);
        memcpy(leaves + lo, got + (uint64_t)p * pl->per, (hi - lo) * sizeof(*leaves));
    }
    for (int j = 0; rc == MT_OK && j < pl->n; j++) {
        mt_digest_tensor_desc t = plan_desc(s, pl, j);
        names[j] = pl->names[j];
        rc = mt_digest_tensor_from_leaves(&t, leaves + pl->first[j],
                                          pl->first[j + 1] - pl->first[j], &d[j], err);
    }
    if (rc == MT_OK) {
        names[pl->n] = "optimizer/iterations";
        rc = iterations_digest(s->devs[0].t, &d[pl->n], err);
    }
    if (rc == MT_OK)
        rc = mt_digest_root(names, d, pl->n + 1, out, err);
    mt_free(leaves);
    mt_free(d);
    mt_free(names);
    return rc;
}

/* Whether every device holds every tensor whole: several devices, every layout replicated. */
static bool replicas_share_digest(const mt_spmd *s)
{
    if (s->ndev < 2)
        return false;
    for (size_t i = 0; i < s->n_params; i++)
        if (!mt_layout_is_replicated(&s->playout[i]))
            return false;
    return true;
}

/* mt_spmd_digest_world over replicas: the devices share the leaves out (DESIGN above). */
static mt_code digest_shared(mt_spmd *s, mt_digest *out, bool *have, mt_err *err)
{
    bool writer = s->devs[0].comm != NULL;
    digest_plan pl;
    mt_code rc = plan_make(s, &pl, err);

    if (rc == MT_OK)
        rc = zero_sync(s, true, err);
    if (rc == MT_OK) {
        s->jgroup = s->all_pos;
        s->jdg = &pl;
        s->jcall = (mt_coll_call){DIGEST_TAG + s->ndigests++, 0, 0};
        rc = run_job(s, JOB_DIGEST, err);
        s->jdg = NULL;
    }
    if (rc == MT_OK && writer)
        rc = digest_from_leaves(s, &pl, out, err);
    *have = rc == MT_OK && writer;
    for (int p = 0; p < s->ndev; p++) {
        mt_free(s->devs[p].gbuf);
        s->devs[p].gbuf = NULL;
    }
    plan_free(&pl);
    return rc;
}

mt_code mt_spmd_digest_world(mt_spmd *s, mt_digest *out, bool *have, mt_err *err)
{
    bool writer = s->devs[0].comm != NULL;
    size_t cap = 3 * s->n_params + 1;
    digest_acc a = {NULL, NULL, 0};
    mt_err derr = MT_ERR_INIT;
    mt_code rc, drc = MT_OK;

    *have = false;
    if (replicas_share_digest(s))
        return digest_shared(s, out, have, err);
    if (!mt_spmd_save_needs_gather(s)) { /* one process: rank 0's computes */
        if (!writer)
            return MT_OK;
        rc = mt_spmd_digest(s, out, err);
        *have = rc == MT_OK;
        return rc;
    }
    a.names = mt_calloc(cap, sizeof(char *));
    a.d = mt_calloc(cap, sizeof(mt_digest));
    if (a.names == NULL || a.d == NULL)
        drc = mt_err_set(&derr, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    rc = gather_each(s, writer, digest_gathered, &a, &drc, &derr, err);
    if (rc == MT_OK && writer && drc == MT_OK &&
        (a.names[a.n] = mt_strdup("optimizer/iterations")) == NULL)
        drc = mt_err_set(&derr, MT_RESOURCE_EXHAUSTED, "digest: out of memory");
    if (rc == MT_OK && writer && drc == MT_OK)
        drc = iterations_digest(s->devs[0].t, &a.d[a.n++], &derr);
    if (rc == MT_OK && writer && drc == MT_OK)
        drc = mt_digest_root((const char *const *)a.names, a.d, a.n, out, &derr);
    for (size_t i = 0; a.names != NULL && i < cap; i++)
        mt_free(a.names[i]);
    mt_free(a.names);
    mt_free(a.d);
    if (rc != MT_OK)
        return rc;
    if (drc != MT_OK)
        return mt_err_set(err, drc, "%s", derr.msg);
    *have = writer;
    return MT_OK;
}

/* One agreement over every rank (a 1-float allreduce of the flags) tagged `call`. */
static mt_code agree_all(mt_spmd *s, mt_coll_call call, bool mine, bool *any, mt_err *err)
{
    mt_code rc;

    *any = false;
    s->jgroup = s->all_pos;
    s->jflag = mine ? 1.0f : 0.0f;
    s->jcall = call;
    rc = run_job(s, JOB_AGREE, err);
    if (rc == MT_OK)
        *any = s->devs[s->first_local].flag > 0.0f;
    return rc;
}

mt_code mt_spmd_flag_any(mt_spmd *s, bool mine, bool *any, mt_err *err)
{
    return agree_all(s, (mt_coll_call){AGREE_TAG + s->nagree++, 0, 0}, mine, any, err);
}

mt_code mt_spmd_start_together(mt_spmd *s, uint64_t step, mt_err *err)
{
    bool any;
    return agree_all(s, (mt_coll_call){step, MT_SPMD_START_SEQ, 0}, false, &any, err);
}
