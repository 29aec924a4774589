/* SPDX-License-Identifier: MIT */
/* conn.c — the CLI's connection to the coordinator (contract in cli.h). */
#include "client/cli.h"
#include "rpc/mt_rpc.h"
#include "tls/mt_tls.h"

mt_code mt_cli_connect(const mt_cli_global *g, struct mt_rpc_client **out, mt_err *err)
{
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    char token[MT_RPC_TOKEN_MAX];
    mt_tls *tls = NULL;
    mt_code rc;

    *out = NULL;
    if (g->token_file != NULL) {
        rc = mt_rpc_token_load(g->token_file, token, err);
        if (rc != MT_OK)
            return rc;
        co.token = token;
    }
    if (mt_tls_url_is_tls(g->coordinator)) {
        mt_tls_opts to = MT_TLS_OPTS_DEFAULTS;
        to.ca_file = g->tls_ca != NULL && g->tls_ca[0] != '\0' ? g->tls_ca : NULL;
        to.server_name =
            g->tls_server_name != NULL && g->tls_server_name[0] != '\0' ? g->tls_server_name : NULL;
        if (to.ca_file == NULL)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "coordinator %s uses TLS: give --tls-ca FILE (or $MESHTRAIN_TLS_CA)",
                              g->coordinator);
        if ((rc = mt_tls_new(&to, &tls, err)) != MT_OK)
            return rc;
        co.tls = tls;
    }
    co.url = g->coordinator;
    co.connect_timeout_ms = g->timeout_ms < 5000 ? g->timeout_ms : 5000;
    rc = mt_rpc_client_open(&co, out, err);
    mt_tls_free(tls); /* the client holds its own reference */
    return rc;
}
