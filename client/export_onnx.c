/* SPDX-License-Identifier: MIT */
/*
 * export_onnx.c — `meshtrain export --format onnx`: a checkpoint's model as an ONNX graph
 * (opset 13) with its weights as initializers, written with protobuf-c from the vendored subset
 * of onnx.proto (proto/onnx/onnx.proto).
 *
 * How it fits: cmd_export.c resolves and opens the checkpoint and calls mt_cli_export_onnx
 * (export.h); the model and every layer's shape come from the job spec the checkpoint stores
 * (mt_cli_export_model_init), the weights from the checkpoint (mt_ckpt_read).
 *
 * DESIGN. The graph keeps meshtrain's conventions at its edges: the input "input" is
 * (N, H, W, C) (or (N, F)), float32, exactly what meshtrain's model sees (pixels scaled to
 * [0, 1]); the output "output" is the last layer's (probabilities after a softmax, else logits).
 * Inside, ONNX's Conv, MaxPool and BatchNormalization want channels on axis 1, so a value carries
 * a tag: as meshtrain has it (channels last) or channels first. A Transpose is inserted where a
 * layer needs the other one (conv2d, max_pool2d and batch_norm of rank >= 2 take channels first;
 * flatten and dense take channels last, so a flatten keeps the NHWC order the dense kernels were
 * trained on and the kernels need no reordering); each value is transposed at most once per
 * direction. Conv kernels (KH, KW, C, F) become (F, C, KH, KW); dense kernels stay (in, out) as
 * Gemm's B; a batch norm without gamma / beta gets constant ones / zeros. Dropout is an Identity
 * (inference), add a Sum, concatenate a Concat on the last meshtrain axis (axis 1 when channels
 * first). "same" padding pads (k-1)/2 before and the rest after, as core/tensor does.
 *
 * Memory: every protobuf struct, string and array of the graph is allocated in one arena (a list
 * of mt_calloc blocks) freed at the end; an allocation failure latches b->oom and the export
 * returns RESOURCE_EXHAUSTED.
 * Threading: one thread; blocks on disk I/O. Conventions: docs/export.md.
 * Tests: tests/integration/test_export_onnx.sh (onnx.checker and predictions of every test image
 * against `meshtrain predict`, with examples/onnx_check.py).
 */
#include "alloc/mt_alloc.h"
#include "client/export.h"
#include "proto/onnx/onnx.pb-c.h"
#include "tensor/mt_tensor.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ONNX_OPSET      13
#define ONNX_IR_VERSION 7 /* the IR version of opset 13 (ONNX 1.8) */

/* A value of the graph: its name in each channel placement ("" until made). */
typedef struct onnx_value {
    char *last;  /* channels last: meshtrain's layout */
    char *first; /* channels first (rank >= 2 per example) */
    int rank;    /* per-example rank */
} onnx_value;

typedef struct onnx_builder {
    void **blocks; /* arena */
    size_t n_blocks, cap_blocks;
    bool oom;
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    const mt_ckpt *ck;
    const char **used; /* checkpoint weights read (borrowed from ck's header or the arena) */
    size_t n_used, cap_used;
} onnx_builder;

/* ------------------------------------------------------------------ arena */

static void *arena(onnx_builder *b, size_t n)
{
    void *p;

    if (b->oom)
        return NULL;
    if (b->n_blocks == b->cap_blocks) {
        size_t cap = b->cap_blocks ? 2 * b->cap_blocks : 256;
        void **nb = mt_realloc(b->blocks, cap * sizeof(*nb));
        if (nb == NULL) {
            b->oom = true;
            return NULL;
        }
        b->blocks = nb, b->cap_blocks = cap;
    }
    p = mt_calloc(1, n ? n : 1);
    if (p == NULL) {
        b->oom = true;
        return NULL;
    }
    b->blocks[b->n_blocks++] = p;
    return p;
}

static char *arena_printf(onnx_builder *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static char *arena_printf(onnx_builder *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    char *s;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || (s = arena(b, (size_t)n + 1)) == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Append p to the growing array *arr (n, cap); false when out of memory. */
static bool push(onnx_builder *b, void ***arr, size_t *n, size_t *cap, void *p)
{
    if (p == NULL || b->oom)
        return false;
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        void **na = mt_realloc(*arr, c * sizeof(*na));
        if (na == NULL) {
            b->oom = true;
            return false;
        }
        *arr = na, *cap = c;
    }
    (*arr)[(*n)++] = p;
    return true;
}

static void builder_free(onnx_builder *b)
{
    for (size_t i = 0; i < b->n_blocks; i++)
        mt_free(b->blocks[i]);
    mt_free(b->blocks);
    mt_free(b->nodes);
    mt_free(b->inits);
    mt_free(b->used);
}

/* ------------------------------------------------------------------ nodes and attributes */

static Onnx__AttributeProto *attr_new(onnx_builder *b, const char *name)
{
    Onnx__AttributeProto *a = arena(b, sizeof(*a));

    if (a != NULL) {
        onnx__attribute_proto__init(a);
        a->name = (char *)name; /* static strings */
        a->has_type = 1;
    }
    return a;
}

static Onnx__AttributeProto *attr_int(onnx_builder *b, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = attr_new(b, name);

    if (a != NULL) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1, a->i = v;
    }
    return a;
}

static Onnx__AttributeProto *attr_float(onnx_builder *b, const char *name, float v)
{
    Onnx__AttributeProto *a = attr_new(b, name);

    if (a != NULL) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        a->has_f = 1, a->f = v;
    }
    return a;
}

static Onnx__AttributeProto *attr_ints(onnx_builder *b, const char *name, const int64_t *v, int n)
{
    Onnx__AttributeProto *a = attr_new(b, name);
    int64_t *copy = arena(b, (size_t)n * sizeof(*copy));

    if (a == NULL || copy == NULL)
        return NULL;
    memcpy(copy, v, (size_t)n * sizeof(*copy));
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = (size_t)n, a->ints = copy;
    return a;
}

/*
 * Add node op (named `name`) reading inputs[0..n_in) into output `out`, with the NULL-terminated
 * attributes that follow. Names are borrowed from the arena or static storage.
 */
static void node(onnx_builder *b, const char *op, const char *name, const char *const *inputs,
                 int n_in, const char *out, ...)
{
    Onnx__NodeProto *nd = arena(b, sizeof(*nd));
    char **in = arena(b, (size_t)n_in * sizeof(*in));
    char **outs = arena(b, sizeof(*outs));
    Onnx__AttributeProto **attrs = arena(b, 8 * sizeof(*attrs));
    Onnx__AttributeProto *a;
    va_list ap;

    if (nd == NULL || in == NULL || outs == NULL || attrs == NULL || out == NULL || name == NULL)
        return;
    onnx__node_proto__init(nd);
    nd->op_type = (char *)op;
    nd->name = (char *)name;
    for (int k = 0; k < n_in; k++) {
        if (inputs[k] == NULL)
            return; /* an allocation failed: b->oom is set */
        in[k] = (char *)inputs[k];
    }
    nd->n_input = (size_t)n_in, nd->input = in;
    outs[0] = (char *)out;
    nd->n_output = 1, nd->output = outs;
    va_start(ap, out);
    while ((a = va_arg(ap, Onnx__AttributeProto *)) != NULL && nd->n_attribute < 8)
        attrs[nd->n_attribute++] = a;
    va_end(ap);
    if (!b->oom)
        nd->attribute = attrs;
    push(b, (void ***)&b->nodes, &b->n_nodes, &b->cap_nodes, nd);
}

/* ------------------------------------------------------------------ initializers */

/* A float32 initializer `name` of shape dims[rank]; returns its data (zeroed) or NULL. */
static float *init_new(onnx_builder *b, const char *name, const int64_t *dims, int rank)
{
    Onnx__TensorProto *t = arena(b, sizeof(*t));
    int64_t *d = arena(b, (size_t)rank * sizeof(*d));
    size_t n = 1;
    float *data;

    for (int k = 0; k < rank; k++)
        n *= (size_t)dims[k];
    data = arena(b, n * sizeof(float));
    if (t == NULL || d == NULL || data == NULL || name == NULL)
        return NULL;
    onnx__tensor_proto__init(t);
    memcpy(d, dims, (size_t)rank * sizeof(*d));
    t->name = (char *)name;
    t->n_dims = (size_t)rank, t->dims = d;
    t->has_data_type = 1, t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->has_raw_data = 1, t->raw_data.len = n * sizeof(float), t->raw_data.data = (uint8_t *)data;
    if (!push(b, (void ***)&b->inits, &b->n_inits, &b->cap_inits, t))
        return NULL;
    return data;
}

/* Fill data with n copies of v; returns data. */
static float *fill(float *data, size_t n, float v)
{
    for (size_t i = 0; data != NULL && i < n; i++)
        data[i] = v;
    return data;
}

/*
 * Read checkpoint weight src, which must be F32 of shape want[rank], into a new float buffer in
 * the arena (*out). FAILED_PRECONDITION when it is missing or differs.
 */
static mt_code weight_read(onnx_builder *b, const char *src, const int64_t *want, int rank,
                           float **out, mt_err *err)
{
    mt_ckpt_tensor_info info;
    size_t n = 1;
    mt_code rc;

    *out = NULL;
    if (src == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
    if (mt_ckpt_find(b->ck, src, &info, NULL) != MT_OK)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "export: the checkpoint has no weight '%s' (the stored spec's model "
                          "needs it)",
                          src);
    for (int k = 0; k < rank; k++)
        n *= (size_t)want[k];
    if (info.dtype != MT_CKPT_F32 || info.rank != rank ||
        memcmp(info.shape, want, (size_t)rank * sizeof(*want)) != 0)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "export: weight '%s' is %s of rank %d with %llu bytes; the stored "
                          "spec's model needs F32 of %zu elements",
                          src, mt_ckpt_dtype_name(info.dtype), info.rank,
                          (unsigned long long)info.nbytes, n);
    *out = arena(b, n * sizeof(float));
    if (*out == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
    rc = mt_ckpt_read(b->ck, src, *out, n * sizeof(float), err);
    if (rc == MT_OK)
        push(b, (void ***)&b->used, &b->n_used, &b->cap_used, (void *)info.name);
    return rc;
}

/* Initializer `layer.to` copied from checkpoint weight `layer.from` of shape dims[rank]. */
static mt_code init_copy(onnx_builder *b, const char *layer, const char *from, const char *to,
                         const int64_t *dims, int rank, mt_err *err)
{
    float *src, *dst;
    size_t n = 1;
    mt_code rc = weight_read(b, arena_printf(b, "%s.%s", layer, from), dims, rank, &src, err);

    if (rc != MT_OK)
        return rc;
    for (int k = 0; k < rank; k++)
        n *= (size_t)dims[k];
    dst = init_new(b, arena_printf(b, "%s.%s", layer, to), dims, rank);
    if (dst != NULL)
        memcpy(dst, src, n * sizeof(float));
    return MT_OK;
}

/* ------------------------------------------------------------------ values and layers */

/* The name of value v with channels first (want) or last, adding a Transpose the first time. */
static const char *place(onnx_builder *b, onnx_value *v, bool want_first)
{
    int64_t perm[4];
    int r = v->rank;

    if (r < 2) /* (N, F): one placement */
        return v->last;
    if (want_first && v->first == NULL) { /* (N, d1..dr) -> (N, dr, d1..dr-1) */
        perm[0] = 0, perm[1] = r;
        for (int k = 1; k < r; k++)
            perm[k + 1] = k;
        v->first = arena_printf(b, "%s/channels_first", v->last);
        node(b, "Transpose", v->first, (const char *const *)&v->last, 1, v->first,
             attr_ints(b, "perm", perm, r + 1), NULL);
    } else if (!want_first && v->last == NULL) { /* (N, dr, d1..) -> (N, d1..dr) */
        perm[0] = 0;
        for (int k = 1; k < r; k++)
            perm[k] = k + 1;
        perm[r] = 1;
        v->last = arena_printf(b, "%s/channels_last", v->first);
        node(b, "Transpose", v->last, (const char *const *)&v->first, 1, v->last,
             attr_ints(b, "perm", perm, r + 1), NULL);
    }
    return want_first ? v->first : v->last;
}

/* Apply layer l's activation to pre-activation value `pre` (named `name`'s raw output); returns
 * the name of the layer's output. axis: the softmax axis. */
static const char *activate(onnx_builder *b, const mt_layer_spec *l, const char *pre, int axis)
{
    const char *out;

    if (l->activation == MT_ACT_LINEAR)
        return pre;
    out = arena_printf(b, "%s", l->name);
    switch (l->activation) {
    case MT_ACT_RELU:
        node(b, "Relu", arena_printf(b, "%s/relu", l->name), &pre, 1, out, NULL);
        break;
    case MT_ACT_TANH:
        node(b, "Tanh", arena_printf(b, "%s/tanh", l->name), &pre, 1, out, NULL);
        break;
    case MT_ACT_SIGMOID:
        node(b, "Sigmoid", arena_printf(b, "%s/sigmoid", l->name), &pre, 1, out, NULL);
        break;
    case MT_ACT_LEAKY_RELU:
        node(b, "LeakyRelu", arena_printf(b, "%s/leaky_relu", l->name), &pre, 1, out,
             attr_float(b, "alpha", MT_LEAKY_RELU_SLOPE), NULL);
        break;
    default: /* softmax; gelu is refused by onnx_supported */
        node(b, "Softmax", arena_printf(b, "%s/softmax", l->name), &pre, 1, out,
             attr_int(b, "axis", axis), NULL);
        break;
    }
    return out;
}

/* The name the layer's main op writes: the layer's name, or "<name>/linear" before an
 * activation. */
static char *pre_name(onnx_builder *b, const mt_layer_spec *l)
{
    return l->activation == MT_ACT_LINEAR ? arena_printf(b, "%s", l->name)
                                          : arena_printf(b, "%s/linear", l->name);
}

static mt_code layer_dense(onnx_builder *b, const mt_layer_spec *l, onnx_value *x,
                           const mt_cli_export_shape *xs, onnx_value *out, mt_err *err)
{
    int64_t in = 1, dims[2];
    const char *ins[3];
    char *pre = pre_name(b, l);
    mt_code rc;

    for (int a = 0; a < xs->rank; a++)
        in *= (int64_t)xs->shape[a];
    ins[0] = place(b, x, false);
    if (xs->rank > 1) /* per row of a sequence or image: MatMul, not in this exporter yet */
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "%s: --format onnx cannot express a dense layer on a rank-%d input yet; "
                          "export safetensors instead",
                          l->name, xs->rank);
    dims[0] = in, dims[1] = (int64_t)l->units;
    rc = init_copy(b, l->name, "kernel", "kernel", dims, 2, err); /* (in, out): Gemm's B */
    ins[1] = arena_printf(b, "%s.kernel", l->name);
    if (rc == MT_OK && l->use_bias) {
        rc = init_copy(b, l->name, "bias", "bias", &dims[1], 1, err);
        ins[2] = arena_printf(b, "%s.bias", l->name);
    }
    if (rc != MT_OK)
        return rc;
    node(b, "Gemm", arena_printf(b, "%s/gemm", l->name), ins, l->use_bias ? 3 : 2, pre, NULL);
    out->rank = 1;
    out->last = (char *)activate(b, l, pre, 1);
    return MT_OK;
}

static mt_code layer_conv(onnx_builder *b, const mt_layer_spec *l, onnx_value *x,
                          const mt_cli_export_shape *xs, onnx_value *out, mt_err *err)
{
    int64_t kdims[4] = {(int64_t)l->kh, (int64_t)l->kw, (int64_t)xs->shape[2], (int64_t)l->filters};
    int64_t f = kdims[3], c = kdims[2], kh = kdims[0], kw = kdims[1];
    mt_conv2d_geom g = {0,     xs->shape[0], xs->shape[1], xs->shape[2], l->kh,
                        l->kw, l->filters,   l->same,      l->sh,        l->sw};
    int64_t sh = l->sh > 0 ? (int64_t)l->sh : 1, sw = l->sw > 0 ? (int64_t)l->sw : 1;
    int64_t wdims[4] = {f, c, kh, kw}, ks[2] = {kh, kw}, strides[2] = {sh, sw};
    int64_t oh = (int64_t)mt_conv2d_out_h(&g), ow = (int64_t)mt_conv2d_out_w(&g);
    int64_t pt = (int64_t)mt_conv2d_pad_top(&g), pl = (int64_t)mt_conv2d_pad_left(&g);
    int64_t nh = (oh - 1) * sh + kh - (int64_t)xs->shape[0];
    int64_t nw = (ow - 1) * sw + kw - (int64_t)xs->shape[1];
    int64_t pads[4] = {pt, pl, l->same && nh > pt ? nh - pt : 0, l->same && nw > pl ? nw - pl : 0};
    const char *ins[3];
    char *pre = pre_name(b, l);
    float *src, *w;
    mt_code rc = weight_read(b, arena_printf(b, "%s.kernel", l->name), kdims, 4, &src, err);

    if (rc != MT_OK)
        return rc;
    w = init_new(b, arena_printf(b, "%s.weight", l->name), wdims, 4);
    for (int64_t i = 0; w != NULL && i < kh; i++) /* (KH, KW, C, F) -> (F, C, KH, KW) */
        for (int64_t j = 0; j < kw; j++)
            for (int64_t ci = 0; ci < c; ci++)
                for (int64_t fi = 0; fi < f; fi++)
                    w[((fi * c + ci) * kh + i) * kw + j] = src[((i * kw + j) * c + ci) * f + fi];
    ins[0] = place(b, x, true);
    ins[1] = arena_printf(b, "%s.weight", l->name);
    if (l->use_bias) {
        rc = init_copy(b, l->name, "bias", "bias", &f, 1, err);
        ins[2] = arena_printf(b, "%s.bias", l->name);
        if (rc != MT_OK)
            return rc;
    }
    node(b, "Conv", arena_printf(b, "%s/conv", l->name), ins, l->use_bias ? 3 : 2, pre,
         attr_ints(b, "kernel_shape", ks, 2), attr_ints(b, "pads", pads, 4),
         attr_ints(b, "strides", strides, 2), NULL);
    out->rank = 3;
    out->first = (char *)activate(b, l, pre, 1);
    return MT_OK;
}

static mt_code layer_batch_norm(onnx_builder *b, const mt_layer_spec *l, onnx_value *x,
                                const mt_cli_export_shape *xs, onnx_value *out, mt_err *err)
{
    static const char *const from[] = {"gamma", "beta", "moving_mean", "moving_variance"};
    static const char *const to[] = {"scale", "bias", "mean", "var"};
    int64_t feat = (int64_t)xs->shape[xs->rank - 1];
    const char *ins[5];
    mt_code rc = MT_OK;

    ins[0] = place(b, x, true);
    for (int k = 0; rc == MT_OK && k < 4; k++) {
        bool held = (k == 0 && l->scale) || (k == 1 && l->center) || k >= 2;
        ins[k + 1] = arena_printf(b, "%s.%s", l->name, to[k]);
        if (held)
            rc = init_copy(b, l->name, from[k], to[k], &feat, 1, err);
        else /* a batch norm without gamma (beta) scales by 1 (shifts by 0) */
            fill(init_new(b, ins[k + 1], &feat, 1), (size_t)feat, k == 0 ? 1.0f : 0.0f);
    }
    if (rc != MT_OK)
        return rc;
    out->rank = xs->rank;
    if (xs->rank < 2)
        out->last = arena_printf(b, "%s", l->name);
    else
        out->first = arena_printf(b, "%s", l->name);
    node(b, "BatchNormalization", arena_printf(b, "%s/batch_norm", l->name), ins, 5,
         xs->rank < 2 ? out->last : out->first, attr_float(b, "epsilon", l->epsilon), NULL);
    return MT_OK;
}

/* Layers without weights: max_pool2d, flatten, dropout, add, concatenate. */
static void layer_plain(onnx_builder *b, const mt_layer_spec *l, onnx_value **xs, int rank,
                        onnx_value *out)
{
    const char *ins[MT_LAYER_MAX_INPUTS];
    char *name = arena_printf(b, "%s", l->name), *pre = pre_name(b, l);
    bool first = xs[0]->last == NULL; /* joins and dropout keep the first input's placement */
    int64_t win[2] = {(int64_t)l->kh, (int64_t)l->kw}, str[2] = {(int64_t)l->sh, (int64_t)l->sw};
    int axis = 1;

    out->rank = rank;
    switch (l->kind) {
    case MT_LAYER_MAX_POOL2D:
        ins[0] = place(b, xs[0], true);
        node(b, "MaxPool", name, ins, 1, pre, attr_ints(b, "kernel_shape", win, 2),
             attr_ints(b, "strides", str, 2), NULL);
        first = true;
        break;
    case MT_LAYER_FLATTEN:
        ins[0] = place(b, xs[0], false);
        node(b, "Flatten", name, ins, 1, pre, attr_int(b, "axis", 1), NULL);
        first = false;
        break;
    case MT_LAYER_DROPOUT:    /* inference: the identity */
    case MT_LAYER_ACTIVATION: /* the identity, then activate() */
        ins[0] = place(b, xs[0], first);
        node(b, "Identity", name, ins, 1, pre, NULL);
        break;
    case MT_LAYER_ADD:
    case MT_LAYER_CONCATENATE:
        for (int k = 0; k < l->n_inputs; k++)
            ins[k] = place(b, xs[k], first);
        if (l->kind == MT_LAYER_ADD)
            node(b, "Sum", name, ins, l->n_inputs, pre, NULL);
        else /* meshtrain's last axis */
            node(b, "Concat", name, ins, l->n_inputs, pre,
                 attr_int(b, "axis", first || rank < 2 ? 1 : rank), NULL);
        break;
    default:
        return;
    }
    if (first && rank >= 2)
        out->first = (char *)activate(b, l, pre, axis);
    else
        out->last = (char *)activate(b, l, pre, rank < 2 ? 1 : rank);
}

/* ------------------------------------------------------------------ model */

static Onnx__ValueInfoProto *value_info(onnx_builder *b, const char *name,
                                        const mt_cli_export_shape *s)
{
    Onnx__ValueInfoProto *vi = arena(b, sizeof(*vi));
    Onnx__TypeProto *tp = arena(b, sizeof(*tp));
    Onnx__TypeProto__Tensor *tt = arena(b, sizeof(*tt));
    Onnx__TensorShapeProto *sh = arena(b, sizeof(*sh));
    Onnx__TensorShapeProto__Dimension **dims = arena(b, 4 * sizeof(*dims));

    if (vi == NULL || tp == NULL || tt == NULL || sh == NULL || dims == NULL)
        return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int k = 0; k <= s->rank; k++) {
        Onnx__TensorShapeProto__Dimension *d = arena(b, sizeof(*d));
        if (d == NULL)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (k == 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = "N";
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = (int64_t)s->shape[k - 1];
        }
        dims[k] = d;
    }
    sh->n_dim = (size_t)s->rank + 1, sh->dim = dims;
    tt->has_elem_type = 1, tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
    vi->name = (char *)name, vi->type = tp;
    return vi;
}

/* Build the graph of model m into b; *output = the name of the last layer's value. */
static mt_code build_graph(onnx_builder *b, const mt_cli_export_model *m, const char **output,
                           mt_err *err)
{
    const mt_job_spec *spec = m->spec;
    onnx_value *vals = arena(b, ((size_t)spec->n_layers + 1) * sizeof(*vals));
    onnx_value input = {"input", NULL, m->input.rank};
    mt_code rc = MT_OK;

    if (vals == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
    for (int i = 0; rc == MT_OK && i < spec->n_layers && !b->oom; i++) {
        const mt_layer_spec *l = &spec->layers[i];
        mt_cli_export_shape in[MT_LAYER_MAX_INPUTS];
        onnx_value *xs[MT_LAYER_MAX_INPUTS];
        mt_cli_export_layer_inputs(m, i, in);
        for (int k = 0; k < l->n_inputs; k++)
            xs[k] = l->inputs[k] == MT_LAYER_INPUT ? &input : &vals[l->inputs[k]];
        if (l->kind == MT_LAYER_DENSE)
            rc = layer_dense(b, l, xs[0], &in[0], &vals[i], err);
        else if (l->kind == MT_LAYER_CONV2D)
            rc = layer_conv(b, l, xs[0], &in[0], &vals[i], err);
        else if (l->kind == MT_LAYER_BATCH_NORM)
            rc = layer_batch_norm(b, l, xs[0], &in[0], &vals[i], err);
        else
            layer_plain(b, l, xs, m->outputs[i].rank, &vals[i]);
    }
    if (rc == MT_OK) {
        const char *last = place(b, &vals[spec->n_layers - 1], false);
        node(b, "Identity", "output", &last, 1, "output", NULL);
        *output = "output";
    }
    if (rc == MT_OK && b->oom)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
    return rc;
}

static bool onnx_uses(void *ctx, const char *name)
{
    const onnx_builder *b = ctx;

    for (size_t k = 0; k < b->n_used; k++)
        if (strcmp(b->used[k], name) == 0)
            return true;
    return false;
}

/* Write len bytes of data to path through "<path>.tmp.XXXXXX", fsync and rename. */
static mt_code write_atomic(const char *path, const void *data, size_t len, mt_err *err)
{
    size_t n = strlen(path) + 16;
    char *tmp = mt_malloc(n);
    const unsigned char *p = data;
    int fd;

    if (tmp == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0) {
        mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_INTERNAL, "create %s: %s", tmp,
                   strerror(errno));
        mt_free(tmp);
        return err != NULL ? err->code : MT_INTERNAL;
    }
    (void)fchmod(fd, 0644);
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        p += w, len -= (size_t)w;
    }
    if (len > 0 || fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        if (len > 0)
            close(fd);
        unlink(tmp);
        mt_err_set(err, MT_INTERNAL, "write %s: %s", path, strerror(e));
        mt_free(tmp);
        return err != NULL ? err->code : MT_INTERNAL;
    }
    mt_free(tmp);
    return MT_OK;
}

/* FAILED_PRECONDITION naming the first layer this exporter cannot express in ONNX opset 13. */
static mt_code onnx_supported(const mt_job_spec *spec, mt_err *err)
{
    for (int i = 0; i < spec->n_layers; i++) {
        const mt_layer_spec *l = &spec->layers[i];
        const char *why = NULL;
        if (l->activation == MT_ACT_GELU)
            why = "a gelu activation (ONNX has Gelu from opset 20; this export writes opset 13)";
        else if (l->kind == MT_LAYER_LAYER_NORM)
            why = "layer_norm (ONNX has LayerNormalization from opset 17)";
        else if (l->kind == MT_LAYER_GLOBAL_AVERAGE_POOLING2D ||
                 l->kind == MT_LAYER_AVERAGE_POOLING2D)
            why = "average pooling (not in this exporter yet)";
        else if (l->kind == MT_LAYER_EMBEDDING || l->kind == MT_LAYER_POSITION_EMBEDDING ||
                 l->kind == MT_LAYER_ATTENTION)
            why = "the sequence layers (embedding, position_embedding, attention) yet";
        if (why != NULL)
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "model.layers[%d] (%s): --format onnx cannot express %s; export "
                              "safetensors instead",
                              i, l->name, why);
    }
    return MT_OK;
}

mt_code mt_cli_export_onnx(const mt_ckpt *ck, const char *output, int *nodes, mt_err *err)
{
    onnx_builder b = {0};
    mt_cli_export_model m;
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    Onnx__StringStringEntryProto meta[2] = {ONNX__STRING_STRING_ENTRY_PROTO__INIT,
                                            ONNX__STRING_STRING_ENTRY_PROTO__INIT};
    Onnx__StringStringEntryProto *metas[2] = {&meta[0], &meta[1]};
    Onnx__ValueInfoProto *gin[1], *gout[1];
    const char *out_name = NULL;
    char step[32];
    uint8_t *buf = NULL;
    size_t len;
    mt_code rc;

    *nodes = 0;
    rc = mt_cli_export_model_init(ck, "--format onnx", &m, err);
    if (rc != MT_OK)
        return rc;
    if ((rc = onnx_supported(m.spec, err)) != MT_OK)
        goto out;
    b.ck = ck;
    rc = build_graph(&b, &m, &out_name, err);
    if (rc == MT_OK)
        rc = mt_cli_export_check_used(ck, onnx_uses, &b, err);
    if (rc != MT_OK)
        goto out;
    gin[0] = value_info(&b, "input", &m.input);
    gout[0] = value_info(&b, out_name, &m.outputs[m.spec->n_layers - 1]);
    if (b.oom || gin[0] == NULL || gout[0] == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory");
        goto out;
    }
    graph.name = m.spec->name[0] != '\0' ? (char *)m.spec->name : "meshtrain";
    graph.n_node = b.n_nodes, graph.node = b.nodes;
    graph.n_initializer = b.n_inits, graph.initializer = b.inits;
    graph.n_input = 1, graph.input = gin;
    graph.n_output = 1, graph.output = gout;
    opset.domain = "", opset.has_version = 1, opset.version = ONNX_OPSET;
    snprintf(step, sizeof(step), "%llu", (unsigned long long)mt_ckpt_step(ck));
    meta[0].key = "meshtrain.spec", meta[0].value = (char *)mt_ckpt_spec(ck);
    meta[1].key = "meshtrain.step", meta[1].value = step;
    model.has_ir_version = 1, model.ir_version = ONNX_IR_VERSION;
    model.n_opset_import = 1, model.opset_import = opsets;
    model.producer_name = "meshtrain";
    model.doc_string = "input: float32 (N, H, W, C) or (N, F), what meshtrain's model sees "
                       "(pixels scaled to [0, 1]); output: the last layer's values";
    model.graph = &graph;
    model.n_metadata_props = 2, model.metadata_props = metas;
    len = protobuf_c_message_get_packed_size(&model.base);
    if (len > ((size_t)2 << 30) - 1) { /* protobuf's limit for one message */
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "export: the ONNX model would take %zu bytes; a protobuf message is "
                        "limited to 2 GiB",
                        len);
        goto out;
    }
    buf = mt_malloc(len ? len : 1);
    if (buf == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "export: out of memory (%zu bytes)", len);
        goto out;
    }
    protobuf_c_message_pack(&model.base, buf);
    rc = write_atomic(output, buf, len, err);
    if (rc == MT_OK)
        *nodes = (int)b.n_nodes;
out:
    mt_free(buf);
    builder_free(&b);
    mt_cli_export_model_fini(&m);
    return rc;
}
