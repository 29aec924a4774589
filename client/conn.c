/* SPDX-License-Identifier: MIT */
/* conn.c — the CLI's connection to the coordinator (contract in cli.h). */
#include "client/cli.h"
#include "rpc/mt_rpc.h"

mt_code mt_cli_connect(const mt_cli_global *g, struct mt_rpc_client **out, mt_err *err)
{
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    char token[MT_RPC_TOKEN_MAX];
    mt_code rc;

    *out = NULL;
    if (g->token_file != NULL) {
        rc = mt_rpc_token_load(g->token_file, token, err);
        if (rc != MT_OK)
            return rc;
        co.token = token;
    }
    co.url = g->coordinator;
    co.connect_timeout_ms = g->timeout_ms < 5000 ? g->timeout_ms : 5000;
    return mt_rpc_client_open(&co, out, err);
}
