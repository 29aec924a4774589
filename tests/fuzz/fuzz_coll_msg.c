/* SPDX-License-Identifier: MIT */
/*
 * fuzz_coll_msg.c — fuzz target for the data-plane message decoder of
 * core/coll: any bytes are decoded as a frame header (coll__hdr_decode) and,
 * if accepted, delivered as a frame (coll_frame) to a small in-process world (its engine's
 * deliver), as the transports do with what arrives from the network. Nothing may crash,
 * read out of bounds or leak. Seeds: tests/fuzz/corpus/fuzz_coll_msg/.
 */
#include <stdint.h>
#include <string.h>

#include "coll/coll_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_coll_world *w = NULL;
    coll_frame *f;
    coll_hdr h;
    if (mt_coll_world_new_local(4, NULL, &w, NULL) != MT_OK)
        return 0;
    if (coll__hdr_decode(data, size, &h) == MT_OK &&
        (f = coll__frame_new(&h, size - COLL_HDR_SIZE)) != NULL) {
        if (size > COLL_HDR_SIZE)
            memcpy(coll__frame_payload(f), data + COLL_HDR_SIZE, size - COLL_HDR_SIZE);
        w->engine->deliver(w, f); /* takes f */
    }
    mt_coll_world_free(w);
    return 0;
}
