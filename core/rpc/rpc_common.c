/* SPDX-License-Identifier: MIT */
/*
 * rpc_common.c — helpers shared by the RPC server and client (mt_rpc.h): nng
 * error translation, token files and constant-time comparison, method names.
 * Thread-safe (no state). Tests: tests/unit/test_rpc.c.
 */
#include "rpc/rpc_int.h"

#include <errno.h>
#include <nng/nng.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

mt_code mt_rpc_code_from_nng(int rv)
{
    switch (rv) {
    case 0:
        return MT_OK;
    case NNG_ETIMEDOUT:
        return MT_DEADLINE_EXCEEDED;
    case NNG_ECANCELED:
    case NNG_ECLOSED:
        return MT_CANCELLED;
    case NNG_ENOMEM:
        return MT_RESOURCE_EXHAUSTED;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
    case NNG_EMSGSIZE:
    case NNG_EBADTYPE:
        return MT_INVALID_ARGUMENT;
    case NNG_EPERM:
        return MT_PERMISSION_DENIED;
    case NNG_ECONNREFUSED:
    case NNG_ECONNRESET:
    case NNG_ECONNABORTED:
    case NNG_ECONNSHUT:
    case NNG_EUNREACHABLE:
    case NNG_EADDRINUSE:
        return MT_UNAVAILABLE;
    default:
        return MT_INTERNAL;
    }
}

int mt_rpc_token_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b), n = na > nb ? na : nb;
    unsigned char diff = (unsigned char)(na != nb);

    /* walk the longer length whatever the contents, so timing leaks only lengths */
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < na ? (unsigned char)a[i] : 0;
        unsigned char cb = i < nb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0;
}

mt_code mt_rpc_token_load(const char *path, char out[MT_RPC_TOKEN_MAX], mt_err *err)
{
    struct stat st;
    FILE *f;
    size_t n;

    out[0] = '\0';
    if (stat(path, &st) != 0)
        return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_PERMISSION_DENIED,
                          "token file %s: %s", path, strerror(errno));
    if ((st.st_mode & 077) != 0)
        return mt_err_set(err, MT_PERMISSION_DENIED,
                          "token file %s: readable by group or others (mode %04o); "
                          "run chmod 600 %s",
                          path, (unsigned)(st.st_mode & 07777), path);
    f = fopen(path, "r");
    if (f == NULL)
        return mt_err_set(err, MT_PERMISSION_DENIED, "token file %s: %s", path, strerror(errno));
    if (fgets(out, MT_RPC_TOKEN_MAX, f) == NULL)
        out[0] = '\0';
    fclose(f);
    n = strlen(out);
    while (n > 0 &&
           (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ' || out[n - 1] == '\t'))
        out[--n] = '\0';
    if (n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "token file %s: empty", path);
    if (n >= MT_RPC_TOKEN_MAX - 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "token file %s: token longer than %d bytes",
                          path, MT_RPC_TOKEN_MAX - 2);
    return MT_OK;
}

int mt_rpc__method_name(const ProtobufCServiceDescriptor *svc, const char *method, char *out,
                        size_t cap)
{
    int n = snprintf(out, cap, "%s.%s", svc->short_name, method);
    return n > 0 && (size_t)n < cap;
}

const ProtobufCMethodDescriptor *mt_rpc__find_method(const ProtobufCServiceDescriptor *svc,
                                                     const char *full_name)
{
    size_t n = strlen(svc->short_name);

    if (strncmp(full_name, svc->short_name, n) != 0 || full_name[n] != '.')
        return NULL;
    return protobuf_c_service_descriptor_get_method_by_name(svc, full_name + n + 1);
}
