/* SPDX-License-Identifier: MIT */
/*
 * fuzz_idx.c — libFuzzer target for the IDX decoder (core/data/mt_idx.h): decodes the input
 * from memory and, when it decodes, converts it to images and labels. Any crash, leak or
 * sanitizer report is a bug. Seeds: tests/fuzz/corpus/fuzz_idx/.
 */
#include <stddef.h>
#include <stdint.h>

#include "alloc/mt_alloc.h"
#include "data/mt_idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_idx x;
    mt_err err = MT_ERR_INIT;
    float *px = NULL;
    int32_t *lab = NULL;
    size_t n, h, w, c;

    if (mt_idx_read_mem(data, size, "fuzz", &x, &err) != MT_OK)
        return 0;
    if (mt_idx_to_images(&x, "fuzz", &px, &n, &h, &w, &c, &err) == MT_OK)
        mt_free(px);
    if (mt_idx_to_labels(&x, "fuzz", 10, &lab, &n, &err) == MT_OK)
        mt_free(lab);
    mt_idx_fini(&x);
    return 0;
}
