/* SPDX-License-Identifier: MIT */
/*
 * coll_auth.c — HMAC-SHA-256 (RFC 2104, FIPS 180-4) for the data-plane handshake of coll_raw.c:
 * a connecting process proves it holds the job's shared token by the HMAC of the listener's
 * fresh nonce, the job id and its own address, keyed with the token (the token never crosses
 * the wire).
 *
 * The MAC comes from mbed TLS's libmbedcrypto (Debian libmbedtls-dev 2.28), the library nng's
 * TLS transport already loads into every meshtrain process, rather than from a SHA-256 of our
 * own. Its outputs are those of the hand-written version it replaced, bit for bit (the RFC 4231
 * vectors and the block-size edge vectors of the tests).
 * No state; any thread. Tests: tests/unit/test_coll.c (test_coll_hmac_sha256_*).
 */
#include <mbedtls/md.h>

#include "coll/coll_int.h"

mt_code coll__hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                          unsigned char out[32])
{
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    int rv;

    if (md == NULL || mbedtls_md_get_size(md) != 32)
        return MT_INTERNAL; /* a libmbedcrypto built without SHA-256 */
    rv = mbedtls_md_hmac(md, key, klen, msg, mlen, out);
    if (rv == MBEDTLS_ERR_MD_ALLOC_FAILED)
        return MT_RESOURCE_EXHAUSTED;
    return rv == 0 ? MT_OK : MT_INTERNAL;
}
