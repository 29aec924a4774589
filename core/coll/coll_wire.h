/* SPDX-License-Identifier: MIT */
/*
 * coll_wire.h — the wire format of the data plane (coll_wire.c): the 72-byte frame header every
 * collective message starts with, its kinds, operations and phases, the frame (coll_frame: a
 * received header and its payload, the one type every transport hands the engine), and the two
 * helpers every layer shares (the monotonic clock, the float32 addition of a received payload).
 *
 * The lowest layer of core/coll: it includes no other header of the module and names no
 * transport; the engine, the algorithms (through coll_engine.h) and every transport include it.
 * Tests: tests/unit/test_coll.c, tests/fuzz/fuzz_coll_msg.c.
 */
#ifndef MT_COLL_WIRE_H
#define MT_COLL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

#define COLL_MAGIC    0x4c43544du /* "MTCL" little-endian */
#define COLL_HDR_SIZE 72

enum coll_kind {
    COLL_KIND_DATA = 1,  /* a segment of a collective */
    COLL_KIND_ABORT = 2, /* a participant failed the collective: code + text */
    COLL_KIND_BYE = 3,   /* flush marker sent before closing a connection */
    COLL_KIND_PING = 4,  /* after a deadline: "have you entered this collective?" */
    COLL_KIND_PONG = 5,  /* answer: code COLL_PONG_ENTERED or COLL_PONG_NOT_ENTERED */
};

/* A PONG's code (and the asking member's record of each answer). */
enum coll_pong {
    COLL_PONG_NONE = 0,        /* no answer (yet) */
    COLL_PONG_ENTERED = 1,     /* the member entered the collective asked about */
    COLL_PONG_NOT_ENTERED = 2, /* it did not */
};

enum coll_op {
    COLL_OP_ALLREDUCE = 1,
    COLL_OP_REDUCE_SCATTER = 2,
    COLL_OP_ALLGATHER = 3,
    COLL_OP_BROADCAST = 4,
    COLL_OP_BARRIER = 5,
};

/* Which part of a collective a DATA frame belongs to (the header's phase). */
enum coll_phase {
    COLL_PHASE_REDUCE = 0, /* tree halving (added) / broadcast chain */
    COLL_PHASE_GATHER = 1, /* tree doubling, ring allgather (copied) */
    COLL_PHASE_DIRECT = 2, /* one-hop small path; reduce-scatter's scatter */
    COLL_PHASE_INPUTS = 3, /* small path by recursive doubling: members' inputs (copied) */
    COLL_PHASE_RESULT = 4, /* small path by recursive doubling: result to a folded member */
};

/* Wire header (host order; meshtrain runs on little-endian hosts). coll_wire.c. */
typedef struct coll_hdr {
    uint32_t magic;
    uint8_t kind;    /* enum coll_kind */
    uint8_t op;      /* enum coll_op */
    uint8_t phase;   /* enum coll_phase */
    uint8_t pad;     /* 0 */
    uint64_t job;    /* job id */
    uint64_t step;   /* training step */
    uint32_t seq;    /* collective sequence number */
    int32_t src;     /* sending global rank */
    int32_t dst;     /* receiving global rank */
    uint32_t rstep;  /* ring step within the phase */
    uint32_t chunk;  /* segment index within the ring step */
    uint32_t code;   /* ABORT: mt_code */
    uint64_t total;  /* elements of the collective (per member for allgather) */
    uint64_t offset; /* element offset of the payload in the buffer */
    uint64_t len;    /* payload elements (ABORT: text bytes) */
} coll_hdr;

void coll__hdr_encode(const coll_hdr *h, void *out);

/* Decode a header from COLL_HDR_SIZE bytes (no length check against a message). */
void coll__hdr_parse(const void *b, coll_hdr *h);
/* The header of the n wire bytes at b (header + payload): MT_OK, or MT_INVALID_ARGUMENT (short,
 * bad magic, the payload length disagrees with the header's). */
mt_code coll__hdr_decode(const void *b, size_t n, coll_hdr *h);

/*
 * A received frame: its header (parsed) and its payload (h.len floats for DATA, h.len bytes of
 * text for an ABORT), owned by whoever holds the frame. A transport makes one per frame that
 * arrives, either with coll__frame_new (one allocation; it writes the payload into
 * coll__frame_payload) or around a buffer of its own (release frees both: the nng transport's
 * frames keep their nng message, so nothing is copied), and hands it to the engine's one entry
 * point, whose inboxes hold it until coll__frame_free.
 */
typedef struct coll_frame coll_frame;
struct coll_frame {
    coll_hdr h;
    const unsigned char *data;      /* the payload */
    size_t bytes;                   /* its length */
    uint32_t conn;                  /* the connection or pipe it came on (0: none, in-process) */
    void (*release)(coll_frame *f); /* NULL: made by coll__frame_new */
    void *owner;                    /* release's: what data lives in */
};
/* A frame of header h with room for bytes of payload; NULL when out of memory. */
coll_frame *coll__frame_new(const coll_hdr *h, size_t bytes);
/* The writable payload of a frame from coll__frame_new. */
unsigned char *coll__frame_payload(coll_frame *f);
void coll__frame_free(coll_frame *f); /* NULL: no-op */

/* CLOCK_MONOTONIC in ns. */
int64_t coll__now_ns(void);
/* d[i] = partial[i] + d[i] for i < n (one float32 addition each, in that order). */
void coll__add_into(float *restrict d, const unsigned char *restrict partial, size_t n);
/* (step, seq) packed into one ordered number (a PING's tag). */
uint64_t coll__tag_pack(uint64_t step, uint32_t seq);

#endif
