/* SPDX-License-Identifier: MIT */
/*
 * mt_rawrpc.c — sends the bytes of FILE as one raw request to an RPC server and prints the
 * status the server answered, by name (tests/integration/test_robustness.sh):
 *   mt_rawrpc URL FILE           -> prints e.g. "UNAUTHENTICATED: invalid credential for ..."
 *   mt_rawrpc URL --zeros N      -> sends N zero bytes (oversized frames)
 * Exit 0 when the server answered (whatever its code), 3 when the transport failed (the
 * transport code and message are printed), 2 on usage errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/mt_rpc.h"

int main(int argc, char **argv)
{
    mt_rpc_client_opts o = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_rpc_client *cli = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code server = MT_OK, rc;
    unsigned char *buf = NULL;
    size_t len = 0;

    if (argc == 4 && strcmp(argv[2], "--zeros") == 0) {
        len = strtoul(argv[3], NULL, 10);
        buf = calloc(len ? len : 1, 1);
    } else if (argc == 3) {
        FILE *f = fopen(argv[2], "rb");
        long n;
        if (f == NULL) {
            perror(argv[2]);
            return 2;
        }
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc(n > 0 ? (size_t)n : 1);
        len = buf != NULL && n > 0 && fread(buf, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
        fclose(f);
    } else {
        fprintf(stderr, "usage: mt_rawrpc URL FILE | mt_rawrpc URL --zeros N\n");
        return 2;
    }
    if (buf == NULL)
        return 2;
    o.url = argv[1];
    o.max_msg_bytes = len + (1u << 20);
    if ((rc = mt_rpc_client_open(&o, &cli, &err)) == MT_OK)
        rc = mt_rpc_client_call_raw(cli, buf, len, 5000, &server, &err);
    mt_rpc_client_close(cli);
    free(buf);
    if (rc != MT_OK) {
        printf("transport %s: %s\n", mt_code_name(rc), err.msg);
        return 3;
    }
    printf("%s: %s\n", mt_code_name(server), server == MT_OK ? "" : err.msg);
    return 0;
}
