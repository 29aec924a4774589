/* SPDX-License-Identifier: MIT */
/*
 * mt_mkckpt.c — test helper: writes a checkpoint of the DTensor tutorial MLP
 * (dense_1.kernel 1200x48, dense_1.bias 48, batch_norm gamma/beta 48,
 * dense_2.kernel 48x2, dense_2.bias 2, plus Adam slots) with deterministic
 * values, so integration tests and fuzz seeds need no training engine.
 * usage: mt_mkckpt [--small] OUT.mtc   (--small: 12x4 / 4x2 shapes)
 * Used by tests/integration/test_export.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/mt_ckpt.h"

typedef struct param {
    const char *name;
    int rank;
    int64_t shape[2];
} param;

int main(int argc, char **argv)
{
    int small = argc == 3 && strcmp(argv[1], "--small") == 0;
    const char *out = argv[argc - 1];
    int64_t in = small ? 12 : 1200, hid = small ? 4 : 48;
    param ps[] = {
        {"dense_1.kernel", 2, {in, hid}},  {"dense_1.bias", 1, {hid, 0}},
        {"batch_norm.gamma", 1, {hid, 0}}, {"batch_norm.beta", 1, {hid, 0}},
        {"dense_2.kernel", 2, {hid, 2}},   {"dense_2.bias", 1, {2, 0}},
    };
    static const char *slots[] = {"", "/adam_m", "/adam_v"};
    mt_ckpt_writer *w = NULL;
    mt_err err = MT_ERR_INIT;

    if (argc < 2 || (argc == 3 && !small)) {
        fprintf(stderr, "usage: mt_mkckpt [--small] OUT.mtc\n");
        return 2;
    }
    if (mt_ckpt_writer_open(out, &w, &err) != MT_OK)
        goto fail;
    mt_ckpt_writer_set_position(w, 300, 3, 9600);
    if (mt_ckpt_writer_set_spec(w, "{\"mesh\": {\"batch\": 8}, \"model\": \"tutorial_mlp\"}",
                                &err) != MT_OK)
        goto fail;
    for (size_t s = 0; s < sizeof(slots) / sizeof(slots[0]); s++) {
        for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
            int64_t n = ps[i].shape[0] * (ps[i].rank == 2 ? ps[i].shape[1] : 1);
            float *v = malloc((size_t)n * sizeof(float));
            char name[128];
            mt_code rc;
            for (int64_t k = 0; k < n; k++)
                v[k] = (float)(k % 97) * 0.01f + (float)i + (float)s * 0.5f;
            snprintf(name, sizeof(name), "%s%s", ps[i].name, slots[s]);
            rc = mt_ckpt_writer_add(w, name, MT_CKPT_F32, ps[i].shape, ps[i].rank, v, &err);
            free(v);
            if (rc != MT_OK)
                goto fail;
        }
    }
    if (mt_ckpt_writer_commit(w, &err) != MT_OK) {
        w = NULL;
        goto fail;
    }
    return 0;
fail:
    mt_ckpt_writer_abort(w);
    fprintf(stderr, "mt_mkckpt: %s: %s\n", mt_code_name(err.code), err.msg);
    return 1;
}
