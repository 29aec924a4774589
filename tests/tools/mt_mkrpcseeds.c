/* SPDX-License-Identifier: MIT */
/*
 * mt_mkrpcseeds.c — writes the seed corpora of the RPC fuzz targets:
 *   mt_mkrpcseeds ENVELOPE_DIR MESSAGE_DIR
 * ENVELOPE_DIR (tests/fuzz/corpus/fuzz_rpc_envelope): meshtrain.rpc.Request envelopes as a
 * client sends them (valid calls with the token "fuzz-token", a wrong token, no token, another
 * protocol major, an unknown method, a malformed payload, truncated and garbage bytes).
 * MESSAGE_DIR (tests/fuzz/corpus/fuzz_coord_msg): for every method of service Coordinator one
 * input and one output message with every field set (repeated fields twice), each prefixed by
 * the selector byte of fuzz_coord_msg.c (2 * method index, + 1 for the output).
 * Messages are encoded field by field from the protobuf-c descriptors, so a field added to
 * proto/coordinator.proto gets into the seeds without editing this file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/coordinator.pb-c.h"
#include "proto/rpc.pb-c.h"

typedef struct buf {
    uint8_t d[8192];
    size_t n;
} buf;

static void put_varint(buf *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        b->d[b->n++] = (uint8_t)(c | (v ? 0x80 : 0));
    } while (v);
}

static void put_bytes(buf *b, uint32_t num, const void *p, size_t len)
{
    put_varint(b, (uint64_t)num << 3 | 2);
    put_varint(b, len);
    memcpy(b->d + b->n, p, len);
    b->n += len;
}

/* Every field of desc, repeated ones twice; nested messages to `depth` levels. */
static void encode_all(const ProtobufCMessageDescriptor *desc, buf *b, int depth)
{
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &desc->fields[i];
        int reps = f->label == PROTOBUF_C_LABEL_REPEATED ? 2 : 1;
        for (int r = 0; r < reps; r++) {
            switch (f->type) {
            case PROTOBUF_C_TYPE_DOUBLE: {
                double v = 0.25 + r;
                put_varint(b, (uint64_t)f->id << 3 | 1);
                memcpy(b->d + b->n, &v, 8);
                b->n += 8;
                break;
            }
            case PROTOBUF_C_TYPE_STRING:
            case PROTOBUF_C_TYPE_BYTES:
                put_bytes(b, f->id, f->name, strlen(f->name));
                break;
            case PROTOBUF_C_TYPE_MESSAGE: {
                buf sub = {.n = 0};
                if (depth > 0)
                    encode_all(f->descriptor, &sub, depth - 1);
                put_bytes(b, f->id, sub.d, sub.n);
                break;
            }
            default: /* varint kinds: int32/64, uint32/64, bool, enum */
                put_varint(b, (uint64_t)f->id << 3);
                put_varint(b, f->type == PROTOBUF_C_TYPE_BOOL ? 1 : 7 + (uint64_t)r);
                break;
            }
        }
    }
}

static int write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n) {
        perror(path);
        if (f != NULL)
            fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

/* Pack an envelope around payload into out; returns its length. */
static size_t envelope(uint8_t *out, uint32_t major, const char *method, const char *cred,
                       const buf *payload)
{
    Meshtrain__Rpc__Request env = MESHTRAIN__RPC__REQUEST__INIT;

    env.protocol_major = major;
    env.protocol_minor = 0;
    env.method = (char *)method;
    env.request_id = 42;
    env.timeout_ms = 3000;
    env.credential = (char *)cred;
    env.payload.data = (uint8_t *)payload->d;
    env.payload.len = payload->n;
    return meshtrain__rpc__request__pack(&env, out);
}

int main(int argc, char **argv)
{
    const ProtobufCServiceDescriptor *svc = &meshtrain__coordinator__descriptor;
    static uint8_t out[16384];
    int bad = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: %s ENVELOPE_DIR MESSAGE_DIR\n", argv[0]);
        return 2;
    }
    for (unsigned i = 0; i < svc->n_methods; i++) {
        const ProtobufCMethodDescriptor *m = &svc->methods[i];
        for (int dir = 0; dir < 2; dir++) {
            const ProtobufCMessageDescriptor *d = dir ? m->output : m->input;
            buf b = {.n = 0};
            ProtobufCMessage *check;
            char name[128];

            encode_all(d, &b, 2);
            check = protobuf_c_message_unpack(d, NULL, b.n, b.d);
            if (check == NULL) {
                fprintf(stderr, "%s: the encoder produced an undecodable message\n", d->name);
                return 1;
            }
            protobuf_c_message_free_unpacked(check, NULL);
            out[0] = (uint8_t)(2 * i + (unsigned)dir);
            memcpy(out + 1, b.d, b.n);
            snprintf(name, sizeof(name), "%02u_%s", 2 * i + (unsigned)dir, d->short_name);
            bad |= write_file(argv[2], name, out, b.n + 1);
            if (dir == 0) { /* a valid call of this method, as the server receives it */
                char full[128];
                snprintf(full, sizeof(full), "%s.%s", svc->short_name, m->name);
                snprintf(name, sizeof(name), "call_%s", m->name);
                bad |= write_file(argv[1], name, out, envelope(out, 1, full, "fuzz-token", &b));
            }
        }
    }
    {
        buf empty = {.n = 0}, junk = {.n = 5};
        size_t n;
        memcpy(junk.d, "\xff\xff\xff\xff\x0f", 5);
        n = envelope(out, 1, "Coordinator.ListWorkers", "wrong-token", &empty);
        bad |= write_file(argv[1], "bad_token", out, n);
        n = envelope(out, 1, "Coordinator.ListWorkers", "", &empty);
        bad |= write_file(argv[1], "no_token", out, n);
        n = envelope(out, 2, "Coordinator.ListWorkers", "fuzz-token", &empty);
        bad |= write_file(argv[1], "protocol_v2", out, n);
        n = envelope(out, 1, "Coordinator.DropTables", "fuzz-token", &empty);
        bad |= write_file(argv[1], "unknown_method", out, n);
        n = envelope(out, 1, "Coordinator.RegisterWorker", "fuzz-token", &junk);
        bad |= write_file(argv[1], "malformed_payload", out, n);
        n = envelope(out, 1, "Coordinator.ListWorkers", "fuzz-token", &empty);
        bad |= write_file(argv[1], "truncated", out, n / 2);
        bad |= write_file(argv[1], "garbage", "\x0a\xff\xff\xff\xff\xff\x01GARBAGE", 14);
    }
    return bad;
}
