/* SPDX-License-Identifier: MIT */
/*
 * coll_test_util.h — the deterministic test data of the collective tests, shared
 * by tests/unit/test_coll.c and tests/tools/mt_coll_peer.c so that both generate
 * the same inputs. Header-only (static inline) because each is its own binary.
 */
#ifndef MT_COLL_TEST_UTIL_H
#define MT_COLL_TEST_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static inline uint64_t ct_splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Element i of rank's input: varied magnitude and sign, so the summation order shows in
 * the bits. */
static inline float ct_val(int rank, size_t i, uint64_t seed)
{
    uint64_t h = ct_splitmix(seed * 1000003u + (uint64_t)rank * 7919u + i);
    float m = (float)((int)(h % 2001) - 1000) / 997.0f;
    return ldexpf(m, (int)((h >> 20) % 17) - 8);
}

#endif
