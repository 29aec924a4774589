/* SPDX-License-Identifier: MIT */
/*
 * model_io.h — loading an exported model (safetensors from `meshtrain export`) into a
 * single-device core/model for the commands that run one: predict and generate.
 * Threading: the CLI is single-threaded.
 */
#ifndef MT_CLIENT_MODEL_IO_H
#define MT_CLIENT_MODEL_IO_H

#include <cjson/cJSON.h>

#include "model/mt_model.h"
#include "status/mt_status.h"

/*
 * Read every parameter of m (borrowed) by name from the safetensors file at path: each must be
 * an F32 tensor of the parameter's shape with offsets inside the file. *metadata (may be NULL)
 * gets the file's "__metadata__" object (returns owned, cJSON_Delete; NULL when absent).
 * Codes: NOT_FOUND / PERMISSION_DENIED (path), INVALID_ARGUMENT ("F: not a safetensors file",
 * "F: no F32 tensor 'dense_1.kernel' of the spec's shape (another model?)", bad offsets),
 * RESOURCE_EXHAUSTED.
 */
mt_code mt_cli_model_load(mt_model *m, const char *path, cJSON **metadata, mt_err *err);

#endif
