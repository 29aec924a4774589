/* SPDX-License-Identifier: MIT */
/*
 * fuzz_coll_msg.c — fuzz target for the data-plane message decoder of
 * core/coll: any bytes are decoded as a message header (coll__hdr_decode) and,
 * if accepted, delivered to a small in-process world (its engine's deliver), as the
 * receive callback does with what arrives from the network. Nothing may crash,
 * read out of bounds or leak. Seeds: tests/fuzz/corpus/fuzz_coll_msg/.
 */
#include <stdint.h>
#include <string.h>

#include "coll/coll_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_coll_world *w = NULL;
    nng_msg *m;
    coll_hdr h;
    if (mt_coll_world_new_local(4, NULL, &w, NULL) != MT_OK)
        return 0;
    if (nng_msg_alloc(&m, size) == 0) {
        if (size > 0)
            memcpy(nng_msg_body(m), data, size);
        if (coll__hdr_decode(m, &h) == MT_OK)
            w->engine->deliver(w, m, &h); /* takes m */
        else
            nng_msg_free(m);
    }
    mt_coll_world_free(w);
    return 0;
}
