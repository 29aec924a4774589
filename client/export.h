/* SPDX-License-Identifier: MIT */
/*
 * export.h — what the export formats of `meshtrain export` share (client/cmd_export.c: the
 * safetensors layouts; client/export_onnx.c: ONNX): the model of a checkpoint's stored job spec
 * with the per-example shape of every layer's output, and the check that every weight of the
 * checkpoint is used by an export.
 * Threading: plain functions, one thread. Tests: tests/integration/test_export_torch.sh,
 * tests/integration/test_export_onnx.sh.
 */
#ifndef MT_CLI_EXPORT_H
#define MT_CLI_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "ckpt/mt_ckpt.h"
#include "model/mt_model.h"
#include "status/mt_status.h"

struct mt_jobspec;

/* A layer output's per-example shape (NHWC images, as meshtrain computes them). */
typedef struct mt_cli_export_shape {
    int rank;
    size_t shape[3];
    bool nhwc_flat; /* a vector in the NHWC flatten order of image img (h*w > 1 and c > 1) */
    size_t img[3];  /* (h, w, c) when nhwc_flat */
} mt_cli_export_shape;

/* The model of a checkpoint: its spec, the model input's shape and each layer's output shape. */
typedef struct mt_cli_export_model {
    struct mt_jobspec *js;
    const mt_job_spec *spec;      /* borrowed from js */
    mt_cli_export_shape input;    /* per-example model input */
    mt_cli_export_shape *outputs; /* [spec->n_layers], owned */
} mt_cli_export_model;

/*
 * Parse the job spec checkpoint ck stores and infer every layer's output shape into *out (the
 * caller releases it with mt_cli_export_model_fini). The input shape is the spec's
 * model.input_shape, else the one its dataset gives. `what` names the export in messages
 * ("--layout torch"). Codes: FAILED_PRECONDITION (no spec stored), INVALID_ARGUMENT / NOT_FOUND
 * (the spec, "export: the checkpoint's job spec: ..."), RESOURCE_EXHAUSTED.
 */
mt_code mt_cli_export_model_init(const mt_ckpt *ck, const char *what, mt_cli_export_model *out,
                                 mt_err *err);

/* Release what mt_cli_export_model_init allocated; zeroed memory is a no-op. */
void mt_cli_export_model_fini(mt_cli_export_model *m);

/* The inputs' shapes of layer i of m into in[0..n_inputs). */
void mt_cli_export_layer_inputs(const mt_cli_export_model *m, int i, mt_cli_export_shape *in);

/*
 * FAILED_PRECONDITION naming the first weight of ck (a tensor without '/') for which
 * used(ctx, name) is false: "export: weight 'x' is not a parameter of the stored spec's model".
 */
mt_code mt_cli_export_check_used(const mt_ckpt *ck, bool (*used)(void *ctx, const char *name),
                                 void *ctx, mt_err *err);

/*
 * Write ck as an ONNX model (opset 13) to output (replaced atomically); *nodes = nodes written.
 * Conventions (input "input" (N, H, W, C) or (N, F) float32 as meshtrain's model sees it, output
 * "output"): docs/export.md. Codes: those of mt_cli_export_model_init, FAILED_PRECONDITION (a
 * weight missing, of another shape or dtype, or unused), DATA_LOSS / INTERNAL (reading ck),
 * INTERNAL (writing output), RESOURCE_EXHAUSTED.
 */
mt_code mt_cli_export_onnx(const mt_ckpt *ck, const char *output, int *nodes, mt_err *err);

#endif
