/* SPDX-License-Identifier: MIT */
/*
 * coll_wire.h — the wire format of the data plane (coll_wire.c): the 72-byte frame header every
 * collective message starts with, its kinds, operations and phases, the frame (coll_frame: a
 * received header and its payload, the one type every transport hands the engine), and the
 * helpers every layer shares (the monotonic clock, a busy-wait turn, the float32 additions).
 *
 * The lowest layer of core/coll: it includes no other header of the module and names no
 * transport; the engine, the algorithms (through coll_engine.h) and every transport include it.
 * Tests: tests/unit/test_coll.c, tests/fuzz/fuzz_coll_msg.c.
 */
#ifndef MT_COLL_WIRE_H
#define MT_COLL_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
    COLL_PHASE_WINDOW =
        5, /* a host window's set-up: its name (rstep 0), each member's answer (1) */
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
/* One turn of a busy-wait loop: tells the CPU this thread spins (x86 PAUSE). */
static inline void coll__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
/* d[i] = partial[i] + d[i] for i < n (one float32 addition each, in that order). */
void coll__add_into(float *restrict d, const unsigned char *restrict partial, size_t n);

typedef float coll_v8 __attribute__((vector_size(32)));
/*
 * d[i] = s[i] + d[i] (s_first) or d[i] + s[i] for i < n (s: n floats at any alignment), eight
 * lanes at a time. Each element is still one float32 addition with its operands in that order
 * (no reassociation, no FMA), so the bits equal the scalar loop's. Inline, so that every layer
 * (the algorithms' folds included) adds at vector speed without calling into this file.
 */
static inline void coll__add8(float *restrict d, const void *restrict s, size_t n, bool s_first)
{
    const unsigned char *src = s;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        coll_v8 a, b;
        memcpy(&a, src + i * sizeof(float), sizeof(a));
        memcpy(&b, d + i, sizeof(b));
        b = s_first ? a + b : b + a;
        memcpy(d + i, &b, sizeof(b));
    }
    for (; i < n; i++) {
        float v;
        memcpy(&v, src + i * sizeof(float), sizeof(float));
        d[i] = s_first ? v + d[i] : d[i] + v;
    }
}
/* (step, seq) packed into one ordered number (a PING's tag). */
uint64_t coll__tag_pack(uint64_t step, uint32_t seq);

#endif
