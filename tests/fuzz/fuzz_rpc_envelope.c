/* SPDX-License-Identifier: MIT */
/*
 * fuzz_rpc_envelope.c — libFuzzer target for the RPC request path as the coordinator's server
 * sees it: mt_rpc_decode_request (core/rpc/rpc_decode.c, the function rpc_server.c runs on every
 * received message) with the Coordinator service, a token and a 1 MiB limit. Any input must be
 * accepted with a decoded message of the method's input type or refused with one of the
 * documented codes; a crash, leak or sanitizer report is a bug. An accepted message is packed
 * again (the reply path's code). Seeds: tests/fuzz/corpus/fuzz_rpc_envelope/ (written by
 * tests/tools/mt_mkrpcseeds).
 */
#include <stdint.h>
#include <stdlib.h>

#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_rpc_request r;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    rc = mt_rpc_decode_request(data, size, &meshtrain__coordinator__descriptor, "fuzz-token",
                               1u << 20, &r, &err);
    switch (rc) {
    case MT_OK: {
        size_t n = protobuf_c_message_get_packed_size(r.message);
        uint8_t *p = malloc(n ? n : 1);
        if (r.method == NULL || r.message->descriptor != r.method->input)
            abort();
        if (p != NULL && protobuf_c_message_pack(r.message, p) != n)
            abort();
        free(p);
        break;
    }
    case MT_INVALID_ARGUMENT:
    case MT_FAILED_PRECONDITION:
    case MT_UNAUTHENTICATED:
    case MT_UNIMPLEMENTED:
        if (r.message != NULL || err.msg[0] == '\0')
            abort();
        break;
    default:
        abort(); /* not a documented outcome */
    }
    mt_rpc_request_fini(&r);
    return 0;
}
