/* SPDX-License-Identifier: MIT */
/*
 * digest_int.h — core/digest internals shared with its unit test: SHA-256 over a list of parts
 * by either implementation (the x86 SHA extensions path, sha_x86.c, or mbed TLS's portable one),
 * so the test can prove both give the same bytes.
 */
#ifndef MT_DIGEST_INT_H
#define MT_DIGEST_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether this CPU has the SHA extensions (and SSSE3, SSE4.1) sha_x86.c needs. */
bool mt_digest__has_sha_ni(void);

/* SHA-256 of parts[0] || ... || parts[n-1] (lens[i] bytes each) into out[32]: with the SHA
 * extensions when accel (the caller checked mt_digest__has_sha_ni), else with mbed TLS. */
void mt_digest__sha256(bool accel, const void *const *parts, const size_t *lens, int n,
                       uint8_t out[32]);

#endif
