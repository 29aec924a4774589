/* SPDX-License-Identifier: MIT */
/*
 * fuzz_npy.c — libFuzzer target for the NumPy decoders of core/data (data_npy.c). The first input
 * byte picks the path: even → the rest is one .npy file (decoded, then used as x and as y of a
 * block with integer and with float labels); odd → the rest is an .npz archive whose members
 * "x" and "y" are extracted (stored or inflated, CRC checked) and decoded into a block. Any crash,
 * leak or sanitizer report is a bug; every failure must explain itself, and a decoded block must
 * be consistent. Seeds: tests/fuzz/corpus/fuzz_npy/.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_block(const mt_data_block *b)
{
    if (b->n == 0 || b->dim == 0 || b->x == NULL || b->y == NULL)
        abort();
    if ((b->t == NULL) != (b->t_dim == 0))
        abort();
}

/* Build blocks from x and y as both label types; consumes neither. */
static void blocks(const mt_data__array *x, const mt_data__array *y)
{
    for (int f = 0; f < 2; f++) {
        mt_data_spec s;
        mt_data__array xc = *x, yc = *y;
        mt_data_block b;
        mt_err err = MT_ERR_INIT;
        memset(&s, 0, sizeof(s));
        s.scale = 1.0f;
        s.label_type = f ? MT_DATA_LABEL_FLOAT : MT_DATA_LABEL_INT;
        s.num_classes = f ? 0 : 10;
        xc.f = mt_malloc(x->count * sizeof(float) + 1);
        yc.f = mt_malloc(y->count * sizeof(float) + 1);
        if (xc.f == NULL || yc.f == NULL)
            abort();
        memcpy(xc.f, x->f, x->count * sizeof(float));
        memcpy(yc.f, y->f, y->count * sizeof(float));
        if (mt_data__npy_block(&s, "x", "y", &xc, &yc, &b, &err) == MT_OK) {
            check_block(&b);
            mt_data_block_fini(&b);
        } else if (err.msg[0] == '\0') {
            abort();
        }
        mt_data__array_fini(&xc);
        mt_data__array_fini(&yc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_err err = MT_ERR_INIT;
    mt_data__array a, y;

    if (size < 1)
        return 0;
    if ((data[0] & 1) == 0) {
        if (mt_data__npy_parse(data + 1, size - 1, "fuzz.npy", &a, &err) == MT_OK) {
            blocks(&a, &a);
            mt_data__array_fini(&a);
        } else if (err.msg[0] == '\0') {
            abort();
        }
        return 0;
    }
    memset(&a, 0, sizeof(a));
    memset(&y, 0, sizeof(y));
    for (int k = 0; k < 2; k++) {
        unsigned char *m = NULL;
        size_t mlen = 0;
        mt_code rc =
            mt_data__npz_member(data + 1, size - 1, "fuzz.npz", k ? "y" : "x", &m, &mlen, &err);
        if (rc == MT_OK)
            rc = mt_data__npy_parse(m, mlen, "fuzz.npz[m]", k ? &y : &a, &err);
        mt_free(m);
        if (rc != MT_OK && err.msg[0] == '\0')
            abort();
    }
    if (a.f != NULL && y.f != NULL)
        blocks(&a, &y);
    mt_data__array_fini(&a);
    mt_data__array_fini(&y);
    return 0;
}
