/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ckpt.c — fuzz target for the checkpoint reader (mt_ckpt_open_mem, the
 * from-memory entry point of core/ckpt): any input must be refused with a code
 * or, when accepted, every tensor must read back whole and as a slice without
 * touching memory outside the input. Seeds: tests/fuzz/corpus/fuzz_ckpt/
 * (a valid small checkpoint from tests/tools/mt_mkckpt --small and damaged copies, format
 * version 1; small_v2.mtc is the same in version 2, with tensor digests, which are recomputed).
 * Each input is tried twice: as is, and with its header and preamble checksums
 * recomputed, so mutations reach the header parser instead of stopping at the crc.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ckpt/mt_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_open(const uint8_t *data, size_t size)
{
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;

    if (mt_ckpt_open_mem(data, size, &ck, &err) != MT_OK)
        return;
    (void)mt_ckpt_spec(ck);
    for (int i = 0; i < mt_ckpt_count(ck); i++) {
        mt_ckpt_tensor_info info;
        int64_t off[MT_CKPT_MAX_RANK], loc[MT_CKPT_MAX_RANK];
        void *buf;
        if (mt_ckpt_tensor_at(ck, i, &info, &err) != MT_OK)
            abort();
        buf = malloc(info.nbytes ? (size_t)info.nbytes : 1);
        if (buf == NULL)
            continue;
        if (mt_ckpt_read(ck, info.name, buf, (size_t)info.nbytes, &err) != MT_OK)
            abort(); /* verified at open: reading must succeed */
        for (int d = 0; d < info.rank; d++) {
            off[d] = info.shape[d] / 2;
            loc[d] = info.shape[d] - off[d];
        }
        if (mt_ckpt_read_slice(ck, info.name, off, loc, buf, &err) != MT_OK)
            abort();
        free(buf);
    }
    {
        /* the recorded digests (version 2) and a recomputation that reads every tensor: a
         * mismatch is DATA_LOSS, never a crash */
        mt_digest root;
        (void)mt_ckpt_root(ck, false, false, &root, NULL, &err);
        mt_code rc = mt_ckpt_root(ck, true, true, &root, NULL, &err);
        if (rc != MT_OK && rc != MT_DATA_LOSS && rc != MT_RESOURCE_EXHAUSTED)
            abort();
    }
    mt_ckpt_close(ck);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed;
    uint32_t hlen;

    try_open(data, size);
    if (size < 24)
        return 0;
    hlen = (uint32_t)data[12] | (uint32_t)data[13] << 8 | (uint32_t)data[14] << 16 |
           (uint32_t)data[15] << 24;
    if ((uint64_t)hlen > size - 24)
        return 0;
    fixed = malloc(size);
    if (fixed == NULL)
        return 0;
    memcpy(fixed, data, size);
    put32(fixed + 16, (uint32_t)crc32(0L, fixed + 24, hlen));
    put32(fixed + 20, (uint32_t)crc32(0L, fixed, 20));
    try_open(fixed, size);
    free(fixed);
    return 0;
}
