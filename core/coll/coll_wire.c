/* SPDX-License-Identifier: MIT */
/*
 * coll_wire.c — the wire format of the data plane: the 72-byte frame header every
 * collective message starts with (coll_hdr; host order, meshtrain runs on little-endian
 * hosts), encoded, parsed and checked against a frame's length, and the received frame
 * (coll_frame) the engine's inboxes hold. Every transport carries these frames unchanged
 * (sockets, rings, nng messages, the in-process hop).
 *
 * Also the two helpers every layer shares: the monotonic clock and the float32 addition of a
 * received payload (coll__add_into), so that no transport calls into a file above it.
 *
 * How it fits: the lowest layer of core/coll; it calls nothing of the module. No state; any
 * thread. Tests: tests/unit/test_coll.c, tests/fuzz/fuzz_coll_msg.c.
 */
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_wire.h"

void coll__hdr_encode(const coll_hdr *h, void *out)
{
    unsigned char *b = out;
    memcpy(b + 0, &h->magic, 4);
    b[4] = h->kind;
    b[5] = h->op;
    b[6] = h->phase;
    b[7] = 0;
    memcpy(b + 8, &h->job, 8);
    memcpy(b + 16, &h->step, 8);
    memcpy(b + 24, &h->seq, 4);
    memcpy(b + 28, &h->src, 4);
    memcpy(b + 32, &h->dst, 4);
    memcpy(b + 36, &h->rstep, 4);
    memcpy(b + 40, &h->chunk, 4);
    memcpy(b + 44, &h->code, 4);
    memcpy(b + 48, &h->total, 8);
    memcpy(b + 56, &h->offset, 8);
    memcpy(b + 64, &h->len, 8);
}

void coll__hdr_parse(const void *hb, coll_hdr *h)
{
    const unsigned char *b = hb;
    memcpy(&h->magic, b + 0, 4);
    h->kind = b[4];
    h->op = b[5];
    h->phase = b[6];
    h->pad = b[7];
    memcpy(&h->job, b + 8, 8);
    memcpy(&h->step, b + 16, 8);
    memcpy(&h->seq, b + 24, 4);
    memcpy(&h->src, b + 28, 4);
    memcpy(&h->dst, b + 32, 4);
    memcpy(&h->rstep, b + 36, 4);
    memcpy(&h->chunk, b + 40, 4);
    memcpy(&h->code, b + 44, 4);
    memcpy(&h->total, b + 48, 8);
    memcpy(&h->offset, b + 56, 8);
    memcpy(&h->len, b + 64, 8);
}

mt_code coll__hdr_decode(const void *b, size_t sz, coll_hdr *h)
{
    if (sz < COLL_HDR_SIZE)
        return MT_INVALID_ARGUMENT;
    coll__hdr_parse(b, h);
    if (h->magic != COLL_MAGIC)
        return MT_INVALID_ARGUMENT;
    size_t unit = h->kind == COLL_KIND_DATA ? sizeof(float) : 1;
    if (h->len > (sz - COLL_HDR_SIZE) / unit || h->len * unit != sz - COLL_HDR_SIZE)
        return MT_INVALID_ARGUMENT;
    return MT_OK;
}

/* A frame of coll__frame_new: the struct, then the payload (aligned for floats). */
typedef struct wire_frame {
    coll_frame f;
    unsigned char payload[]; /* at sizeof(coll_frame), a multiple of 8 */
} wire_frame;

coll_frame *coll__frame_new(const coll_hdr *h, size_t bytes)
{
    wire_frame *w = mt_malloc(sizeof(*w) + bytes);
    if (w == NULL)
        return NULL;
    w->f = (coll_frame){.h = *h, .data = w->payload, .bytes = bytes};
    return &w->f;
}

unsigned char *coll__frame_payload(coll_frame *f)
{
    return ((wire_frame *)f)->payload;
}

void coll__frame_free(coll_frame *f)
{
    if (f == NULL)
        return;
    if (f->release != NULL)
        f->release(f);
    else
        mt_free(f);
}

uint64_t coll__tag_pack(uint64_t step, uint32_t seq)
{
    return (step << 24) | (seq & 0xffffffu);
}

int64_t coll__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* partial: n floats at any alignment (coll__add8). */
void coll__add_into(float *restrict d, const unsigned char *restrict partial, size_t n)
{
    coll__add8(d, partial, n, true);
}
