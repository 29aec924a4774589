/* SPDX-License-Identifier: MIT */
/*
 * fuzz_coord_msg.c — libFuzzer target for every message of proto/coordinator.proto: the first
 * byte picks a method of service Coordinator (byte / 2 modulo the method count) and whether the
 * rest is its input (even) or output (odd) message; the rest is unpacked with that descriptor
 * (the server decodes requests this way, the client replies). An accepted message must pack
 * again to its reported size and unpack again. Seeds: tests/fuzz/corpus/fuzz_coord_msg/ (every
 * field set, from tests/tools/mt_mkrpcseeds).
 */
#include <stdint.h>
#include <stdlib.h>

#include "proto/coordinator.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        if (again == NULL)
            abort(); /* what we packed must decode */
        protobuf_c_message_free_unpacked(again, NULL);
        free(p);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}
