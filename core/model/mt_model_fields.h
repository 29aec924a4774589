/* SPDX-License-Identifier: MIT */
/*
 * mt_model_fields.h — typed readers of job-spec JSON fields, shared by the spec parser
 * (core/model/spec.c) and the layer modules' parse functions (core/layers).
 *
 * Every reader takes the object, the key and the field's full JSON path for messages
 * ("model.layers[2].units"); an absent key leaves the default, a present invalid one gives
 * INVALID_ARGUMENT "<path>: <why>". obj and the strings are borrowed. Pure; any thread.
 */
#ifndef MT_MODEL_FIELDS_H
#define MT_MODEL_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/mt_model.h"

struct cJSON;

/* INVALID_ARGUMENT "<path>: <why>". */
mt_code mt_model_field_bad(mt_err *err, const char *path, const char *why);
/* A positive integer <= max. */
mt_code mt_model_field_pos_int(const struct cJSON *obj, const char *key, const char *path,
                               int64_t max, int64_t dflt, int64_t *out, mt_err *err);
/* A finite number in [lo, hi] (lo_open / hi_open exclude the bound). */
mt_code mt_model_field_num(const struct cJSON *obj, const char *key, const char *path, double lo,
                           double hi, bool lo_open, bool hi_open, float dflt, float *out,
                           mt_err *err);
mt_code mt_model_field_bool(const struct cJSON *obj, const char *key, const char *path, bool dflt,
                            bool *out, mt_err *err);
/* A string (borrowed from obj), NULL when absent. */
mt_code mt_model_field_str(const struct cJSON *obj, const char *key, const char *path,
                           const char **out, mt_err *err);
/* "activation" at path: "relu", "softmax" or "linear" (default). */
mt_code mt_model_field_activation(const struct cJSON *obj, const char *path, mt_activation *a,
                                  mt_err *err);
/* An integer k (k x k) or [a, b] of positive integers up to 1024; required or kept. */
mt_code mt_model_field_pair(const struct cJSON *obj, const char *key, const char *path, size_t *a,
                            size_t *b, bool required, mt_err *err);

#endif
