/* SPDX-License-Identifier: MIT */
/*
 * rpc_decode.c — mt_rpc_decode_request (mt_rpc.h): every check the RPC server applies to
 * the bytes of a request, as a pure function, so the server, the unit tests and the
 * libFuzzer target tests/fuzz/fuzz_rpc_envelope.c run exactly the same code.
 * Order of checks: size, envelope, protocol major, credential, method, payload.
 * Thread-safe (no state). Tests: tests/unit/test_rpc.c, tests/fuzz/fuzz_rpc_envelope.c.
 */
#include "rpc/rpc_int.h"

#include <string.h>

#include "proto/rpc.pb-c.h"

void mt_rpc_request_fini(mt_rpc_request *r)
{
    if (r == NULL)
        return;
    if (r->message != NULL)
        protobuf_c_message_free_unpacked(r->message, NULL);
    memset(r, 0, sizeof(*r));
}

mt_code mt_rpc_decode_request(const void *bytes, size_t len,
                              const ProtobufCServiceDescriptor *service, const char *token,
                              size_t max_msg, mt_rpc_request *out, mt_err *err)
{
    const ProtobufCMethodDescriptor *m;
    Meshtrain__Rpc__Request *env;
    mt_code rc = MT_OK;

    memset(out, 0, sizeof(*out));
    if (len > max_msg)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "request of %zu bytes exceeds the maximum message size of %zu bytes", len,
                          max_msg);
    env = meshtrain__rpc__request__unpack(NULL, len, bytes);
    if (env == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "malformed request: %zu bytes that are not a meshtrain.rpc.Request "
                          "envelope",
                          len);
    out->request_id = env->request_id;
    out->timeout_ms = env->timeout_ms;
    if (env->protocol_major != MT_RPC_PROTOCOL_MAJOR) {
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "protocol version mismatch: the client speaks %u.%u, this server speaks "
                        "%d.%d",
                        env->protocol_major, env->protocol_minor, MT_RPC_PROTOCOL_MAJOR,
                        MT_RPC_PROTOCOL_MINOR);
        goto done;
    }
    if (token != NULL && token[0] != '\0' && !mt_rpc_token_equal(env->credential, token)) {
        rc = mt_err_set(err, MT_UNAUTHENTICATED,
                        env->credential[0] ? "invalid credential for %.100s"
                                           : "%.100s requires a token (--token-file)",
                        env->method);
        goto done;
    }
    m = mt_rpc__find_method(service, env->method);
    if (m == NULL) {
        rc = mt_err_set(err, MT_UNIMPLEMENTED, "unknown method '%.100s'", env->method);
        goto done;
    }
    out->message = protobuf_c_message_unpack(m->input, NULL, env->payload.len, env->payload.data);
    if (out->message == NULL) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "malformed %s payload for %.100s (%zu bytes)",
                        m->input->short_name, env->method, env->payload.len);
        goto done;
    }
    out->method = m;
done:
    meshtrain__rpc__request__free_unpacked(env, NULL);
    return rc;
}
