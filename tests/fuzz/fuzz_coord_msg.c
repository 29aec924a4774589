/* SPDX-License-Identifier: MIT */
/*
 * fuzz_coord_msg.c — libFuzzer target for every message of proto/coordinator.proto: the first
 * byte picks a method of service Coordinator (byte / 2 modulo the method count) and whether the
 * rest is its input (even) or output (odd) message; the rest is unpacked with that descriptor
 * (the server decodes requests this way, the client replies). An accepted message must pack
 * again to its reported size and unpack again (unless it kept unknown fields, see has_unknown).
 * Seeds: tests/fuzz/corpus/fuzz_coord_msg/ (every field set, from tests/tools/mt_mkrpcseeds).
 */
#include <stdint.h>
#include <stdlib.h>

#include "proto/coordinator.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * True when msg or a message inside it kept unknown fields. protobuf-c keeps them and packs them
 * back verbatim, but it accepts on input a tag of field number 0 written as a non-minimal varint
 * (0x81 0x00) that it refuses once packed minimally (seed crash-6bdfaf20743a7ce7): the round
 * trip below is only promised for messages without unknown fields. Our code never re-packs a
 * received message, so this is harmless to meshtrain.
 */
static int has_unknown(const ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;

    if (msg->n_unknown_fields > 0)
        return 1;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)msg;
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(const void *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v =
                *(ProtobufCMessage *const *const *)(const void *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                if (has_unknown(v[k]))
                    return 1;
        } else {
            const ProtobufCMessage *sub =
                *(const ProtobufCMessage *const *)(const void *)(base + f->offset);
            if (sub != NULL && has_unknown(sub))
                return 1;
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCServiceDescriptor *svc = &meshtrain__coordinator__descriptor;
    const ProtobufCMethodDescriptor *m;
    const ProtobufCMessageDescriptor *d;
    ProtobufCMessage *msg, *again;
    uint8_t *p;
    size_t n;

    if (size < 1)
        return 0;
    m = &svc->methods[(data[0] / 2u) % svc->n_methods];
    d = (data[0] & 1) ? m->output : m->input;
    msg = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
    if (msg == NULL)
        return 0;
    n = protobuf_c_message_get_packed_size(msg);
    p = malloc(n ? n : 1);
    if (p != NULL) {
        if (protobuf_c_message_pack(msg, p) != n)
            abort();
        again = protobuf_c_message_unpack(d, NULL, n, p);
        if (again == NULL && !has_unknown(msg))
            abort(); /* what we packed must decode */
        if (again != NULL)
            protobuf_c_message_free_unpacked(again, NULL);
        free(p);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}
