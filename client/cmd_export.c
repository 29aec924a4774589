/* SPDX-License-Identifier: MIT */
/*
 * cmd_export.c — `meshtrain export CKPT|JOB [--step S] [--format F] [--layout L] -o FILE`:
 * write the weights of a checkpoint (core/ckpt) in a format other tools read: safetensors (here)
 * or an ONNX model (client/export_onnx.c; shared pieces in client/export.h).
 *
 * Layouts: "keras" (default) writes the checkpoint's weights as stored (mt_ckpt_export_safetensors:
 * names "<layer>.kernel", dense kernels (in, out), conv kernels (KH, KW, C, F), NHWC flatten
 * order). "torch" writes a PyTorch state_dict (torch_plan builds the renaming and permutations
 * from the job spec stored in the checkpoint, mt_ckpt_export_safetensors_map writes them):
 * "<layer>.weight" (out, in) / (F, C, KH, KW), batch norm weight, bias, running_mean,
 * running_var, and a dense (or batch norm) reading a flatten of an image (H, W, C) gets its
 * input axis reordered from NHWC's (h*W + w)*C + c to NCHW's c*H*W + h*W + w. A flattened image
 * that reaches a concatenate, or an add mixing it with other vectors, is refused (the reorder
 * would be per segment; not converted) rather than exported wrong. Conventions:
 * docs/checkpoints.md.
 *
 * The source is resolved in one place (resolve_source): an argument that names a
 * file, contains '/' or ends in ".mtc" is a checkpoint file; anything else is a
 * job id, whose checkpoint (the latest complete one, or --step S) is downloaded
 * from the coordinator with GetCheckpointChunk into a temporary file first.
 * Exit codes (cli.h): 0 ok, 1 corrupt checkpoint or I/O failure, 2 usage,
 * 4 missing file / rejected (also a model --layout torch cannot express).
 * Tests: tests/integration/test_export.sh, tests/integration/test_export_torch.sh,
 * tests/integration/test_export_onnx.sh.
 */
#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "client/cli.h"
#include "client/export.h"
#include "client/jobs_util.h"
#include "jobspec/mt_jobspec.h"
#include "model/mt_model.h"
#include "tensor/mt_tensor.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void export_usage(FILE *out)
{
    fprintf(out,
            "usage: meshtrain export CKPT|JOB|DIR [--step S | --best]\n"
            "                        [--format safetensors|onnx]\n"
            "                        [--layout keras|torch] -o FILE\n\n"
            "Write the weights of checkpoint CKPT (a .mtc file), or of job JOB's latest\n"
            "complete checkpoint (downloaded from the coordinator), to FILE.\n"
            "Optimizer slots (names with '/') are left out.\n\n"
            "Options:\n"
            "  --step S         with JOB: the checkpoint of step S (default: the latest)\n"
            "  --best           the best checkpoint by the spec's validation.best: DIR/best.mtc\n"
            "                   of a train --local --save DIR, or a job's best step\n"
            "  --format F       safetensors (the default): the weights;\n"
            "                   onnx: the model and its weights (opset 13), input\n"
            "                   (N, H, W, C) as meshtrain's model sees it, output the last\n"
            "                   layer's (see docs/export.md)\n"
            "  --layout L       keras (default): weights as stored, '<layer>.kernel'\n"
            "                   (in, out), conv (kh, kw, in, out), NHWC flatten order;\n"
            "                   torch: a PyTorch state_dict, '<layer>.weight' (out, in),\n"
            "                   conv (out, in, kh, kw), NCHW flatten order, batch norm\n"
            "                   running_mean/running_var (see docs/checkpoints.md)\n"
            "  -o, --output F   file to write (replaced atomically)\n"
            "  -h, --help       this help\n");
}

/* Download job_id's checkpoint of step (0 = latest complete) into the open file f. */
static mt_code download(const mt_cli_global *g, const char *job_id, uint64_t step, FILE *f,
                        mt_err *err)
{
    uint64_t off = 0;

    for (;;) {
        Meshtrain__GetCheckpointChunkRequest req = MESHTRAIN__GET_CHECKPOINT_CHUNK_REQUEST__INIT;
        Meshtrain__GetCheckpointChunkReply *rep = NULL;
        mt_code rc;
        bool last;
        req.job_id = (char *)job_id;
        req.step = step;
        req.offset = off;
        req.max_bytes = 4u << 20;
        rc = mt_cli_call(g, "GetCheckpointChunk", &req.base, (ProtobufCMessage **)&rep, err);
        if (rc != MT_OK)
            return rc;
        if (rep->skipped[0] != '\0') /* newer checkpoints whose files did not verify */
            fprintf(stderr, "meshtrain: %s; exporting checkpoint step %llu\n", rep->skipped,
                    (unsigned long long)rep->step);
        step = rep->step; /* pin the step the first chunk came from */
        if (rep->data.len > 0 && fwrite(rep->data.data, 1, rep->data.len, f) != rep->data.len)
            rc = mt_err_set(err, MT_INTERNAL, "job %s checkpoint: write failed", job_id);
        off += rep->data.len;
        last = rep->last || rep->data.len == 0;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (rc != MT_OK || last)
            return rc;
    }
}

/*
 * --best: the best checkpoint ("validation.best", docs/job-spec.md). A directory (train --local's
 * --save DIR) holds it as DIR/best.mtc; for a job id *step becomes the step of its latest
 * "best_step" metric point (the worker uploads the best checkpoint as that step's).
 */
static mt_code best_source(const mt_cli_global *g, const char *arg, uint64_t *step, char *path,
                           size_t n, bool *is_file, mt_err *err)
{
    Meshtrain__GetJobRequest req = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *rep = NULL;
    struct stat st;
    mt_code rc;

    *is_file = false;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        *is_file = true;
        if ((size_t)snprintf(path, n, "%s/best.mtc", arg) >= n)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: path too long", arg);
        if (stat(path, &st) != 0)
            return mt_err_set(err, MT_NOT_FOUND,
                              "%s: no best checkpoint (a spec with \"validation\": {\"best\": "
                              "{...}} trained with --save %s keeps one)",
                              path, arg);
        return MT_OK;
    }
    if (stat(arg, &st) == 0 || strchr(arg, '/') != NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: --best takes a checkpoint directory (train --local --save DIR) or "
                          "a job id",
                          arg);
    req.job_id = (char *)arg;
    if ((rc = mt_cli_call(g, "GetJob", &req.base, (ProtobufCMessage **)&rep, err)) != MT_OK)
        return rc;
    *step = 0;
    for (size_t i = 0; i < rep->n_latest_metrics; i++)
        if (strcmp(rep->latest_metrics[i]->name, "best_step") == 0)
            *step = (uint64_t)rep->latest_metrics[i]->value;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    if (*step == 0)
        return mt_err_set(err, MT_NOT_FOUND,
                          "job %s has no best checkpoint (its spec needs \"validation\": "
                          "{\"best\": {...}})",
                          arg);
    return MT_OK;
}

/* A checkpoint file path for `arg` into path; a job id is downloaded (*tmp set: unlink it). */
static mt_code resolve_source(const mt_cli_global *g, const char *arg, uint64_t step, char *path,
                              size_t n, bool *tmp, mt_err *err)
{
    struct stat st;
    size_t len = strlen(arg);
    const char *dir = getenv("TMPDIR");
    FILE *f;
    int fd;
    mt_code rc;

    *tmp = false;
    if (stat(arg, &st) == 0 || strchr(arg, '/') != NULL ||
        (len > 4 && strcmp(arg + len - 4, ".mtc") == 0)) {
        if ((size_t)snprintf(path, n, "%s", arg) >= n)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: path too long", arg);
        return MT_OK;
    }
    if ((size_t)snprintf(path, n, "%s/meshtrain-export-XXXXXX", dir ? dir : "/tmp") >= n)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "TMPDIR: path too long");
    if ((fd = mkstemp(path)) < 0 || (f = fdopen(fd, "wb")) == NULL) {
        if (fd >= 0)
            close(fd);
        return mt_err_set(err, MT_INTERNAL, "temporary file %s: cannot create it", path);
    }
    *tmp = true;
    rc = download(g, arg, step, f, err);
    if (fclose(f) != 0 && rc == MT_OK)
        rc = mt_err_set(err, MT_INTERNAL, "temporary file %s: write failed", path);
    return rc;
}

/* ------------------------------------------------------------------ torch layout */

/* The plan: output tensors and the checkpoint names they come from (sources point into src). */
typedef struct torch_plan {
    mt_ckpt_export_tensor *t;
    char (*src)[MT_LAYER_NAME_MAX + 24];
    int n, cap;
} torch_plan;

/*
 * Add "<layer>.<to>" from checkpoint "<layer>.<from>" (from NULL: every element is fill),
 * output shape (rank, shape); view_rank > 0: the source viewed as view[] with axes perm[].
 */
static mt_code plan_add(torch_plan *p, const char *layer, const char *from, const char *to,
                        float fill, int rank, const int64_t *shape, int view_rank,
                        const int64_t *view, const int *perm, mt_err *err)
{
    mt_ckpt_export_tensor *e;

    if (p->n == p->cap)
        return mt_err_set(err, MT_INTERNAL, "export: torch plan overflow at %s", layer);
    e = &p->t[p->n];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s.%s", layer, to);
    if (from != NULL) {
        snprintf(p->src[p->n], sizeof(p->src[p->n]), "%s.%s", layer, from);
        e->source = p->src[p->n];
    }
    e->fill = fill;
    e->rank = rank;
    memcpy(e->shape, shape, (size_t)rank * sizeof(*shape));
    e->view_rank = view_rank;
    if (view_rank > 0) {
        memcpy(e->view_shape, view, (size_t)view_rank * sizeof(*view));
        memcpy(e->perm, perm, (size_t)view_rank * sizeof(*perm));
    }
    p->n++;
    return MT_OK;
}

/* FAILED_PRECONDITION for layer l (index i) reading in[] when no PyTorch module can reproduce it:
 * a flattened image concatenated, or added to a vector in another order. */
static mt_code torch_check(const mt_layer_spec *l, int i, const mt_cli_export_shape *in,
                           mt_err *err)
{
    for (int k = 0; l->kind == MT_LAYER_CONCATENATE && k < l->n_inputs; k++)
        if (in[k].nhwc_flat)
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "model.layers[%d] (%s): concatenates a flattened image; "
                              "--layout torch cannot convert it (use keras)",
                              i, l->name);
    for (int k = 1; l->kind == MT_LAYER_ADD && k < l->n_inputs; k++)
        if (in[k].nhwc_flat != in[0].nhwc_flat ||
            (in[0].nhwc_flat && memcmp(in[k].img, in[0].img, sizeof(in[0].img)) != 0))
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "model.layers[%d] (%s): adds a flattened image to a vector in "
                              "another order; --layout torch cannot convert it (use keras)",
                              i, l->name);
    return MT_OK;
}

/* Plan entries of layer l reading x (the first input). */
static mt_code torch_layer(torch_plan *p, const mt_layer_spec *l, const mt_cli_export_shape *x,
                           mt_err *err)
{
    static const int t2[] = {1, 0}, t4[] = {3, 2, 0, 1}, chw[] = {2, 0, 1};
    int64_t in = 1, sh[4], view[4];
    mt_code rc = MT_OK;

    for (int a = 0; a < x->rank; a++)
        in *= (int64_t)x->shape[a];
    if (x->rank > 1 && !x->nhwc_flat) /* a dense layer per row: the last axis */
        in = (int64_t)x->shape[x->rank - 1];
    if (l->kind == MT_LAYER_DENSE) {
        int64_t units = (int64_t)l->units;
        sh[0] = units, sh[1] = in;
        if (x->nhwc_flat) { /* (h, w, c, out) -> (out, c, h, w), seen as (out, c*h*w) */
            view[0] = (int64_t)x->img[0], view[1] = (int64_t)x->img[1];
            view[2] = (int64_t)x->img[2], view[3] = units;
            rc = plan_add(p, l->name, "kernel", "weight", 0, 2, sh, 4, view, t4, err);
        } else {
            view[0] = in, view[1] = units;
            rc = plan_add(p, l->name, "kernel", "weight", 0, 2, sh, 2, view, t2, err);
        }
        if (rc == MT_OK && l->use_bias)
            rc = plan_add(p, l->name, "bias", "bias", 0, 1, &units, 0, NULL, NULL, err);
    } else if (l->kind == MT_LAYER_CONV2D) {
        int64_t f = (int64_t)l->filters;
        view[0] = (int64_t)l->kh, view[1] = (int64_t)l->kw, view[2] = (int64_t)x->shape[2];
        view[3] = f;
        sh[0] = f, sh[1] = view[2], sh[2] = view[0], sh[3] = view[1];
        rc = plan_add(p, l->name, "kernel", "weight", 0, 4, sh, 4, view, t4, err);
        if (rc == MT_OK && l->use_bias)
            rc = plan_add(p, l->name, "bias", "bias", 0, 1, &f, 0, NULL, NULL, err);
    } else if (l->kind == MT_LAYER_BATCH_NORM) {
        /* per feature (the last axis); on a flattened image the features are reordered */
        static const char *const from[] = {"gamma", "beta", "moving_mean", "moving_variance"};
        static const char *const to[] = {"weight", "bias", "running_mean", "running_var"};
        int64_t feat = (int64_t)x->shape[x->rank - 1];
        int vr = x->nhwc_flat ? 3 : 0;
        view[0] = (int64_t)x->img[0], view[1] = (int64_t)x->img[1], view[2] = (int64_t)x->img[2];
        for (int k = 0; rc == MT_OK && k < 4; k++) {
            bool held = (k == 0 && l->scale) || (k == 1 && l->center) || k >= 2;
            /* PyTorch's affine batch norm has both weight and bias: a missing one is constant */
            if (!held && !l->scale && !l->center)
                continue;
            rc = plan_add(p, l->name, held ? from[k] : NULL, to[k], k == 0 ? 1.0f : 0.0f, 1, &feat,
                          held ? vr : 0, view, chw, err);
        }
    }
    return rc;
}

/* ------------------------------------------------------------------ shared (export.h) */

/*
 * Whether layer l's output is a flattened image's vector in NHWC order (out->nhwc_flat, img):
 * a flatten of an image with h*w > 1 and c > 1 makes one; element-wise layers keep their first
 * input's. The shapes themselves come from the layer modules (mt_model_spec_shapes).
 */
static void out_order(const mt_layer_spec *l, const mt_cli_export_shape *in,
                      mt_cli_export_shape *out)
{
    const mt_cli_export_shape *x = &in[0];

    out->nhwc_flat = false;
    switch (l->kind) {
    case MT_LAYER_FLATTEN:
        if (x->rank == 3 && x->shape[0] * x->shape[1] > 1 && x->shape[2] > 1) {
            out->nhwc_flat = true;
            memcpy(out->img, x->shape, sizeof(out->img));
        }
        return;
    case MT_LAYER_BATCH_NORM:
    case MT_LAYER_DROPOUT:
    case MT_LAYER_ADD:
    case MT_LAYER_ACTIVATION:
    case MT_LAYER_LAYER_NORM:
        out->nhwc_flat = x->nhwc_flat;
        memcpy(out->img, x->img, sizeof(out->img));
        return;
    default:
        return;
    }
}

void mt_cli_export_layer_inputs(const mt_cli_export_model *m, int i, mt_cli_export_shape *in)
{
    const mt_layer_spec *l = &m->spec->layers[i];

    for (int k = 0; k < l->n_inputs; k++)
        in[k] = l->inputs[k] == MT_LAYER_INPUT ? m->input : m->outputs[l->inputs[k]];
}

mt_code mt_cli_export_model_init(const mt_ckpt *ck, const char *what, mt_cli_export_model *out,
                                 mt_err *err)
{
    const char *text = mt_ckpt_spec(ck);
    const mt_job_spec *spec;
    int *ranks = NULL;
    size_t(*shapes)[3] = NULL;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (text[0] == '\0')
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "export: the checkpoint stores no job spec; %s needs one", what);
    rc = mt_jobspec_parse(text, strlen(text), &out->js, err);
    if (rc != MT_OK) {
        char why[sizeof(err->msg)];
        snprintf(why, sizeof(why), "%s", err != NULL ? err->msg : "");
        return mt_err_set(err, rc, "export: the checkpoint's job spec: %s", why);
    }
    spec = out->spec = out->js->model;
    out->input.rank = spec->input_rank;
    memcpy(out->input.shape, spec->input_shape, sizeof(out->input.shape));
    if (out->input.rank == 0) {
        mt_jobspec_summary sum;
        rc = mt_jobspec_validate(text, strlen(text), &sum, err);
        if (rc != MT_OK)
            goto fail;
        out->input.rank = sum.input_rank;
        memcpy(out->input.shape, sum.input_shape, sizeof(out->input.shape));
    }
    out->outputs = mt_calloc((size_t)spec->n_layers + 1, sizeof(*out->outputs));
    ranks = mt_calloc((size_t)spec->n_layers + 1, sizeof(*ranks));
    shapes = mt_calloc((size_t)spec->n_layers + 1, sizeof(*shapes));
    if (out->outputs == NULL || ranks == NULL || shapes == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
        goto fail;
    }
    rc = mt_model_spec_shapes(spec, out->input.rank, out->input.shape, ranks, shapes, err);
    for (int i = 0; rc == MT_OK && i < spec->n_layers; i++) {
        mt_cli_export_shape in[MT_LAYER_MAX_INPUTS];
        mt_cli_export_layer_inputs(out, i, in);
        out->outputs[i].rank = ranks[i];
        memcpy(out->outputs[i].shape, shapes[i], sizeof(shapes[i]));
        out_order(&spec->layers[i], in, &out->outputs[i]);
    }
    mt_free(ranks);
    mt_free(shapes);
    if (rc != MT_OK)
        goto fail_model;
    return MT_OK;
fail:
    mt_free(ranks);
    mt_free(shapes);
fail_model:
    mt_cli_export_model_fini(out);
    return rc;
}

void mt_cli_export_model_fini(mt_cli_export_model *m)
{
    mt_free(m->outputs);
    mt_jobspec_free(m->js);
    memset(m, 0, sizeof(*m));
}

mt_code mt_cli_export_check_used(const mt_ckpt *ck, bool (*used)(void *ctx, const char *name),
                                 void *ctx, mt_err *err)
{
    for (int i = 0; i < mt_ckpt_count(ck); i++) {
        mt_ckpt_tensor_info info;
        mt_code rc = mt_ckpt_tensor_at(ck, i, &info, err);
        if (rc != MT_OK)
            return rc;
        if (strchr(info.name, '/') == NULL && !used(ctx, info.name))
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "export: weight '%s' is not a parameter of the stored spec's model",
                              info.name);
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ torch layout (cont.) */

/* Whether the plan (ctx) reads checkpoint weight name. */
static bool torch_uses(void *ctx, const char *name)
{
    const torch_plan *p = ctx;

    for (int k = 0; k < p->n; k++)
        if (p->t[k].source != NULL && strcmp(p->t[k].source, name) == 0)
            return true;
    return false;
}

/*
 * The torch-layout plan of checkpoint ck from the job spec it stores. Codes: FAILED_PRECONDITION
 * (no spec in the checkpoint, a model the layout cannot express, a weight of the checkpoint that
 * is not a parameter of the spec's model), INVALID_ARGUMENT / NOT_FOUND (the spec),
 * RESOURCE_EXHAUSTED.
 */
static mt_code torch_plan_build(const mt_ckpt *ck, torch_plan *p, mt_err *err)
{
    mt_cli_export_model m;
    mt_code rc = mt_cli_export_model_init(ck, "--layout torch", &m, err);

    memset(p, 0, sizeof(*p));
    if (rc != MT_OK)
        return rc;
    p->cap = 4 * m.spec->n_layers;
    p->t = mt_calloc((size_t)p->cap + 1, sizeof(*p->t));
    p->src = mt_calloc((size_t)p->cap + 1, sizeof(*p->src));
    if (p->t == NULL || p->src == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
    for (int i = 0; rc == MT_OK && i < m.spec->n_layers; i++) {
        const mt_layer_spec *l = &m.spec->layers[i];
        mt_cli_export_shape in[MT_LAYER_MAX_INPUTS];
        mt_cli_export_layer_inputs(&m, i, in);
        rc = torch_check(l, i, in, err);
        if (rc == MT_OK)
            rc = torch_layer(p, l, &in[0], err);
    }
    /* every weight of the checkpoint must be converted: a spec that does not match is refused */
    if (rc == MT_OK)
        rc = mt_cli_export_check_used(ck, torch_uses, p, err);
    mt_cli_export_model_fini(&m);
    if (rc != MT_OK) {
        mt_free(p->t);
        mt_free(p->src);
        memset(p, 0, sizeof(*p));
    }
    return rc;
}

/* Write ck in the torch layout to output; *count = tensors written. */
static mt_code export_torch(const mt_ckpt *ck, const char *output, int *count, mt_err *err)
{
    torch_plan p;
    mt_code rc = torch_plan_build(ck, &p, err);
    const char *meta[] = {"format", "pt", "layout", "torch", "spec", mt_ckpt_spec(ck), NULL};

    if (rc != MT_OK)
        return rc;
    rc = mt_ckpt_export_safetensors_map(ck, p.t, p.n, meta, output, err);
    *count = p.n;
    mt_free(p.t);
    mt_free(p.src);
    return rc;
}

int cmd_export(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'},
        {"layout", required_argument, NULL, 'l'},
        {"output", required_argument, NULL, 'o'},
        {"step", required_argument, NULL, 's'},
        {"best", no_argument, NULL, 'b'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *format = "safetensors", *output = NULL, *layout = "keras";
    char path[4096];
    mt_err err = MT_ERR_INIT;
    mt_ckpt *ck = NULL;
    int c, weights = 0, nodes = 0;
    uint64_t step = 0;
    bool tmp = false, torch, onnx, layout_set = false, best = false, best_file = false;
    char *end;
    mt_code rc;

    /* optind = 0 makes glibc re-initialise getopt: main.c parsed with "+" (stop at the first
     * non-option), and that mode would otherwise stick, refusing "CKPT -o FILE" orderings */
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            format = optarg;
            break;
        case 'l':
            layout = optarg;
            layout_set = true;
            break;
        case 'o':
            output = optarg;
            break;
        case 's':
            step = strtoull(optarg, &end, 10);
            if (end == optarg || *end != '\0' || step == 0)
                return mt_cli_usage_error("export", "--step '%s': expected a step >= 1", optarg);
            break;
        case 'b':
            best = true;
            break;
        case 'h':
            export_usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("export", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("export", "expected exactly one checkpoint");
    onnx = strcmp(format, "onnx") == 0;
    if (strcmp(format, "safetensors") != 0 && !onnx)
        return mt_cli_usage_error("export",
                                  "format '%s' is not supported (use safetensors or onnx)", format);
    if (strcmp(layout, "keras") != 0 && strcmp(layout, "torch") != 0)
        return mt_cli_usage_error("export", "layout '%s' is not supported (use keras or torch)",
                                  layout);
    if (onnx && layout_set)
        return mt_cli_usage_error("export", "--layout is for safetensors; an ONNX model has "
                                            "ONNX's own conventions (docs/export.md)");
    if (output == NULL || output[0] == '\0')
        return mt_cli_usage_error("export", "missing -o FILE");
    torch = strcmp(layout, "torch") == 0;
    if (best && step != 0)
        return mt_cli_usage_error("export", "--best and --step exclude each other");
    rc = best ? best_source(g, argv[optind], &step, path, sizeof(path), &best_file, &err) : MT_OK;
    if (rc == MT_OK && !best_file)
        rc = resolve_source(g, argv[optind], step, path, sizeof(path), &tmp, &err);
    if (rc == MT_OK)
        rc = mt_ckpt_open(path, &ck, &err);
    if (rc == MT_OK && onnx)
        rc = mt_cli_export_onnx(ck, output, &nodes, &err);
    else if (rc == MT_OK && torch)
        rc = export_torch(ck, output, &weights, &err);
    else if (rc == MT_OK)
        rc = mt_ckpt_export_safetensors(ck, output, &err);
    if (tmp)
        unlink(path);
    if (rc != MT_OK) {
        mt_ckpt_close(ck);
        return mt_cli_fail(&err);
    }
    if (onnx) {
        printf("exported an ONNX model (opset 13, %d nodes) of step %llu from %s to %s\n", nodes,
               (unsigned long long)mt_ckpt_step(ck), tmp ? argv[optind] : path, output);
        mt_ckpt_close(ck);
        return MT_EXIT_OK;
    }
    for (int i = 0; !torch && i < mt_ckpt_count(ck); i++) {
        mt_ckpt_tensor_info info;
        if (mt_ckpt_tensor_at(ck, i, &info, NULL) == MT_OK && strchr(info.name, '/') == NULL)
            weights++;
    }
    printf("exported %d weights of step %llu from %s to %s (%s layout)\n", weights,
           (unsigned long long)mt_ckpt_step(ck), tmp ? argv[optind] : path, output, layout);
    mt_ckpt_close(ck);
    return MT_EXIT_OK;
}
