/* SPDX-License-Identifier: MIT */
/*
 * sha_x86.c — SHA-256 with the x86 SHA extensions (SHA-NI: sha256rnds2, sha256msg1/2), about
 * 15 times mbed TLS's portable code on this project's machines (bench/bench_digest.c prints
 * both): the digest of a model state reads every byte of it once, so this is its whole cost.
 *
 * How it fits: digest.c calls mt_digest__sha256 with accel = mt_digest__has_sha_ni() (CPUID);
 * without the extensions, or on another architecture, the same function runs mbed TLS. The
 * compression function follows Intel's "SHA extensions" white paper: the state is kept as
 * ABEF / CDGH, each 4-round group adds its message words and round constants and runs two
 * sha256rnds2; message words 16..63 come from sha256msg1, an alignr and sha256msg2.
 * Threading: pure. Tests: tests/unit/test_digest.c (both paths against each other on every
 * length 0..300 and on large inputs, and the known answers of docs/reproducibility.md).
 */
#include "digest/digest_int.h"

#include <mbedtls/sha256.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

static bool probe_sha_ni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19)))
        return false; /* SSSE3, SSE4.1 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    return (b & (1u << 29)) != 0; /* SHA */
}

/* CPUID traps to the hypervisor on a virtual machine (tens of microseconds), and a state digest
 * asks once per tensor and once per root: the answer is read once per process. Racing first
 * callers store the same value. */
bool mt_digest__has_sha_ni(void)
{
    static int known; /* 0 not yet read, 1 no, 2 yes */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k == 0) {
        k = probe_sha_ni() ? 2 : 1;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

/* Compress nblocks 64-byte blocks of data into state (a..h). */
__attribute__((target("sha,sse4.1,ssse3"))) static void
compress(uint32_t state[8], const uint8_t *data, size_t nblocks)
{
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i s0, s1, tmp, msg, x[4];

    tmp = _mm_loadu_si128((const __m128i *)&state[0]);
    s1 = _mm_loadu_si128((const __m128i *)&state[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);  /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);    /* EFGH */
    s0 = _mm_alignr_epi8(tmp, s1, 8);    /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0); /* CDGH */
    for (; nblocks > 0; nblocks--, data += 64) {
        __m128i abef = s0, cdgh = s1;
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) { /* 4 rounds per group */
            if (g < 4)
                x[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * g)), mask);
            else /* W[4g..4g+3] from the four groups before: x[g%4] holds group g-4 */
                x[g % 4] = _mm_sha256msg2_epu32(
                    _mm_add_epi32(_mm_sha256msg1_epu32(x[g % 4], x[(g + 1) % 4]),
                                  _mm_alignr_epi8(x[(g + 3) % 4], x[(g + 2) % 4], 4)),
                    x[(g + 3) % 4]);
            msg = _mm_add_epi32(x[g % 4], _mm_loadu_si128((const __m128i *)&K[4 * g]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            msg = _mm_shuffle_epi32(msg, 0x0E);
            s0 = _mm_sha256rnds2_epu32(s0, s1, msg);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);   /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);    /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0); /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);    /* HGFE */
    _mm_storeu_si128((__m128i *)&state[0], s0);
    _mm_storeu_si128((__m128i *)&state[4], s1);
}

static void sha256_accel(const void *const *parts, const size_t *lens, int n, uint8_t out[32])
{
    uint32_t st[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    uint8_t buf[128];
    size_t have = 0;
    uint64_t total = 0;

    for (int i = 0; i < n; i++) {
        const uint8_t *p = parts[i];
        size_t len = lens[i];
        total += len;
        if (have > 0) { /* top up the partial block first */
            size_t k = 64 - have < len ? 64 - have : len;
            memcpy(buf + have, p, k);
            have += k, p += k, len -= k;
            if (have < 64)
                continue;
            compress(st, buf, 1);
            have = 0;
        }
        compress(st, p, len / 64);
        memcpy(buf, p + len / 64 * 64, len % 64);
        have = len % 64;
    }
    buf[have++] = 0x80; /* padding: 0x80, zeros, the bit length big-endian */
    size_t end = have <= 56 ? 64 : 128;
    memset(buf + have, 0, end - have);
    for (int i = 0; i < 8; i++)
        buf[end - 1 - i] = (uint8_t)((total * 8) >> (8 * i));
    compress(st, buf, end / 64);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(st[i] >> 24);
        out[4 * i + 1] = (uint8_t)(st[i] >> 16);
        out[4 * i + 2] = (uint8_t)(st[i] >> 8);
        out[4 * i + 3] = (uint8_t)st[i];
    }
}
#else
bool mt_digest__has_sha_ni(void)
{
    return false;
}
#endif

void mt_digest__sha256(bool accel, const void *const *parts, const size_t *lens, int n,
                       uint8_t out[32])
{
    mbedtls_sha256_context c;
#if defined(__x86_64__) || defined(__i386__)
    if (accel) {
        sha256_accel(parts, lens, n, out);
        return;
    }
#else
    (void)accel;
#endif
    mbedtls_sha256_init(&c);
    mbedtls_sha256_starts_ret(&c, 0);
    for (int i = 0; i < n; i++)
        if (lens[i] > 0)
            mbedtls_sha256_update_ret(&c, parts[i], lens[i]);
    mbedtls_sha256_finish_ret(&c, out);
    mbedtls_sha256_free(&c);
}
