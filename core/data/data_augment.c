/* SPDX-License-Identifier: MIT */
/*
 * data_augment.c — training-time image augmentation: random flip, then random crop after zero
 * padding (contract: mt_data_augment in mt_data.h, mt_data__augment in data_int.h).
 *
 * Called by the pipeline (data_pipeline.c) when it assembles a training step. The draws of an
 * example are one 64-bit hash of (seed, epoch, global example index) — no generator state — so
 * every mesh, shard policy, prefetch depth and thread builds the same bits. From the hash r: bit 0
 * flips horizontally, bit 1 vertically (when the mode allows that axis); with padding P the crop
 * offsets are (r >> 8) mod (2P+1) and (r >> 24) mod (2P+1) into the image padded with P zeros
 * (in normalised units) on each side, so the output keeps the input's H×W×C.
 * Threading: pure. Tests: tests/unit/test_data_image.c (augmentation tests).
 */
#include "data/data_int.h"

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void mt_data__augment(const mt_data_augment *a, const size_t shape[3], uint64_t seed,
                      uint64_t epoch, uint64_t gidx, const float *src, float *dst)
{
    size_t H = shape[0], W = shape[1], C = shape[2] ? shape[2] : 1, P = a->crop_padding;
    uint64_t r = mix64(seed ^ mix64(epoch * 0x632be59bd9b4e019ULL ^ mix64(gidx)));
    bool fh = (a->flip & MT_DATA_FLIP_HORIZONTAL) && (r & 1);
    bool fv = (a->flip & MT_DATA_FLIP_VERTICAL) && ((r >> 1) & 1);
    long oy = P ? (long)((r >> 8) % (2 * P + 1)) - (long)P : 0;
    long ox = P ? (long)((r >> 24) % (2 * P + 1)) - (long)P : 0;

    for (size_t y = 0; y < H; y++) {
        long sy = (long)y + oy;
        for (size_t x = 0; x < W; x++) {
            long sx = (long)x + ox;
            float *o = dst + (y * W + x) * C;
            if (sy < 0 || sy >= (long)H || sx < 0 || sx >= (long)W) {
                for (size_t k = 0; k < C; k++)
                    o[k] = 0.0f;
                continue;
            }
            {
                size_t u = fv ? H - 1 - (size_t)sy : (size_t)sy;
                size_t v = fh ? W - 1 - (size_t)sx : (size_t)sx;
                const float *i = src + (u * W + v) * C;
                for (size_t k = 0; k < C; k++)
                    o[k] = i[k];
            }
        }
    }
}
