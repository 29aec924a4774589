/* SPDX-License-Identifier: MIT */
/*
 * model_io.c — the safetensors reader of predict and generate (contract in model_io.h): the
 * 8-byte little-endian header length, the JSON header, then each parameter's bytes at its
 * data_offsets (relative to the end of the header). Tests: tests/integration/test_e2e.sh,
 * test_predict_raw.sh, test_generate.sh.
 */
#include <stdbool.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "client/jobs_util.h"
#include "client/model_io.h"

mt_code mt_cli_model_load(mt_model *m, const char *path, cJSON **metadata, mt_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    uint64_t hlen = 0;
    cJSON *hdr = NULL;
    mt_code rc = mt_cli_read_file(path, &buf, &len, err);

    if (metadata != NULL)
        *metadata = NULL;
    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < 8 && len >= 8; i++)
        hlen |= (uint64_t)(unsigned char)buf[i] << (8 * i);
    if (len < 8 || hlen > len - 8 || (hdr = cJSON_ParseWithLength(buf + 8, hlen)) == NULL) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a safetensors file", path);
        goto done;
    }
    for (size_t i = 0; i < mt_model_param_count(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, p->name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        double a, b;
        bool ok = t != NULL && cJSON_IsString(dt) && strcmp(dt->valuestring, "F32") == 0 &&
                  cJSON_GetArraySize(sh) == p->rank && cJSON_GetArraySize(of) == 2;
        for (int k = 0; ok && k < p->rank; k++)
            ok = cJSON_GetArrayItem(sh, k)->valuedouble == (double)p->shape[k];
        if (!ok) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "%s: no F32 tensor '%s' of the spec's shape (another model?)", path,
                            p->name);
            goto done;
        }
        a = cJSON_GetArrayItem(of, 0)->valuedouble;
        b = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (a < 0 || b - a != (double)(p->size * sizeof(float)) || b > (double)(len - 8 - hlen)) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: tensor '%s' has bad offsets", path,
                            p->name);
            goto done;
        }
        memcpy(p->value, buf + 8 + hlen + (size_t)a, p->size * sizeof(float));
    }
    if (metadata != NULL)
        *metadata = cJSON_DetachItemFromObjectCaseSensitive(hdr, "__metadata__");
done:
    cJSON_Delete(hdr);
    mt_free(buf);
    return rc;
}
