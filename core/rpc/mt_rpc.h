/* SPDX-License-Identifier: MIT */
/*
 * mt_rpc.h — unary RPC over nng request/reply, messages in protobuf-c.
 *
 * Wire: every request is a meshtrain.rpc.Request envelope (proto/rpc.proto) that
 * carries the protocol version, "Service.Method", a request id, the time left
 * until the caller's deadline, a credential and the packed request message; every
 * reply is a meshtrain.rpc.Reply with a status code, a human message and the
 * packed reply message. Methods are looked up in a protobuf-c generated
 * ProtobufCServiceDescriptor (`service` blocks in proto/), which also gives the
 * request and reply message types, so there is no hand-written dispatch table.
 *
 * Server: a REP socket with several nng contexts, so many calls are in flight at
 * once. The server answers by itself (on an nng thread, without involving the
 * application) every request it can refuse: undecodable or truncated bytes and an
 * undecodable payload -> INVALID_ARGUMENT; larger than max_msg_bytes ->
 * INVALID_ARGUMENT; another protocol major version -> FAILED_PRECONDITION naming
 * both versions; wrong or missing credential when a token is set ->
 * UNAUTHENTICATED (constant-time compare); unknown method -> UNIMPLEMENTED. It
 * keeps serving after each. The caller's deadline travels as time left (clocks
 * need not agree); the application can ask mt_rpc_call_expired() before working. Valid calls go to
 * the application's on_call callback, which runs on an nng thread: it must not block (the
 * coordinator queues the call for its loop thread). The application answers exactly once with
 * mt_rpc_call_reply(), from any thread.
 *
 * Client: mt_rpc_client_open() dials synchronously (UNAVAILABLE with the address
 * when nothing listens) and then reconnects by itself if the connection drops.
 * mt_rpc_client_call() is blocking and thread-safe (one nng context per call);
 * a call that gets no reply in time returns DEADLINE_EXCEEDED, or UNAVAILABLE
 * when the connection is down. The reply's code and message are returned as the
 * server set them.
 *
 * Decoding: mt_rpc_decode_request() runs the server's checks as a pure function (the server,
 * the tests and tests/fuzz/fuzz_rpc_envelope.c share it).
 *
 * Threading: see each function. Tests: tests/unit/test_rpc.c.
 */
#ifndef MT_RPC_H
#define MT_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

#define MT_RPC_PROTOCOL_MAJOR  1
#define MT_RPC_PROTOCOL_MINOR  0
#define MT_RPC_DEFAULT_MAX_MSG (64u * 1024u * 1024u) /* 64 MiB: checkpoint chunks are 4 MiB */
#define MT_RPC_TOKEN_MAX       256

typedef struct mt_rpc_server mt_rpc_server;
typedef struct mt_rpc_call mt_rpc_call;
typedef struct mt_rpc_client mt_rpc_client;
struct mt_tls;

/*
 * Called on an nng thread for each valid call; must not block. The application
 * owns `call` until it passes it to mt_rpc_call_reply().
 */
typedef void (*mt_rpc_on_call)(void *arg, mt_rpc_call *call);

/*
 * Optional observer of every answer the server sends (metrics): `method` is the
 * short method name ("Heartbeat"; "" when the request was refused before its
 * method was known), `code` the status sent, `elapsed_us` the time from receiving
 * the request to queueing the reply. Runs on the thread that replied (an nng
 * thread for refusals, else the caller of mt_rpc_call_reply, possibly while that caller
 * holds its own locks); must not block nor take a lock a replier may hold (atomics suit).
 */
typedef void (*mt_rpc_on_reply)(void *arg, const char *method, mt_code code, int64_t elapsed_us);

typedef struct mt_rpc_server_opts {
    const char *url;                           /* "tcp://127.0.0.1:7400"; port 0 = ephemeral */
    const ProtobufCServiceDescriptor *service; /* the methods served */
    size_t max_msg_bytes; /* larger requests: INVALID_ARGUMENT; beyond 2x+1MiB: dropped */
    int contexts;         /* concurrent calls being received */
    const char *token;    /* required credential; NULL or "" = none */
    mt_rpc_on_call on_call;
    void *arg;                /* passed to on_call and on_reply */
    mt_rpc_on_reply on_reply; /* NULL = none */
    const struct mt_tls *tls; /* certificate and key for a tls+tcp:// url (borrowed; core/tls) */
} mt_rpc_server_opts;

#define MT_RPC_SERVER_OPTS_DEFAULTS                                                                \
    {                                                                                              \
        NULL, NULL, MT_RPC_DEFAULT_MAX_MSG, 16, NULL, NULL, NULL, NULL, NULL                       \
    }

/*
 * Listen on opts->url and start receiving. Borrows opts (strings are copied; opts->tls is
 * borrowed only for the call). A tls+tcp:// url needs opts->tls with a certificate and key.
 * Returns MT_OK and *out, or INVALID_ARGUMENT (bad options or URL), UNAVAILABLE
 * (address in use / cannot listen; the message names the address),
 * RESOURCE_EXHAUSTED. Any thread.
 */
mt_code mt_rpc_server_open(const mt_rpc_server_opts *opts, mt_rpc_server **out, mt_err *err);

/* The URL actually bound (ephemeral port resolved). Borrowed, valid until close. */
const char *mt_rpc_server_url(const mt_rpc_server *srv);

/*
 * Stop receiving, close the socket and release the server. Calls still held by
 * the application stay valid: replying to them afterwards is a no-op that frees
 * them. Idempotent for NULL. Never call from on_call. Blocks until no server
 * callback runs.
 */
void mt_rpc_server_close(mt_rpc_server *srv);

/* ---- a call received by the server (borrowed accessors, valid until reply) ---- */

/* The method, as its descriptor in the service. */
const ProtobufCMethodDescriptor *mt_rpc_call_method(const mt_rpc_call *call);
/* The decoded request message (type = method->input). Borrowed. */
const ProtobufCMessage *mt_rpc_call_request(const mt_rpc_call *call);
/* Monotonic ms by which the caller wants the reply; INT64_MAX when none. */
int64_t mt_rpc_call_deadline_ms(const mt_rpc_call *call);
/* True when the deadline has passed (the caller has given up). */
int mt_rpc_call_expired(const mt_rpc_call *call);

/*
 * Answer the call and release it (takes `call`). `reply` (borrowed; type =
 * method->output) is sent when code == MT_OK, else `message` explains the code.
 * Any thread; never blocks (the send completes asynchronously).
 */
void mt_rpc_call_reply(mt_rpc_call *call, mt_code code, const char *message,
                       const ProtobufCMessage *reply);

/* ---- client ---- */

typedef struct mt_rpc_client_opts {
    const char *url;
    const char *token; /* credential sent with every call; NULL = none */
    size_t max_msg_bytes;
    int connect_timeout_ms; /* for the first, synchronous dial */
    /* CA (and optional server name, own certificate) for a tls+tcp:// url; the client takes a
     * reference (mt_tls_hold), so the caller may free its own after opening (core/tls) */
    const struct mt_tls *tls;
} mt_rpc_client_opts;

#define MT_RPC_CLIENT_OPTS_DEFAULTS                                                                \
    {                                                                                              \
        NULL, NULL, MT_RPC_DEFAULT_MAX_MSG, 5000, NULL                                             \
    }

/*
 * Connect to opts->url. Returns MT_OK and *out; UNAVAILABLE ("connect
 * tcp://127.0.0.1:7400: Connection refused") when nothing listens;
 * INVALID_ARGUMENT for a malformed URL, or a tls+tcp:// URL without opts->tls (or without its
 * CA); UNAUTHENTICATED when the server's TLS certificate does not verify (wrong CA or name; the
 * message names the address, the CA file and the name). Blocks up to connect_timeout_ms.
 */
mt_code mt_rpc_client_open(const mt_rpc_client_opts *opts, mt_rpc_client **out, mt_err *err);

/* Close and free; NULL is a no-op. Calls in progress on other threads fail with CANCELLED.
 * Returns within about 5 s: a close that nng does not finish by then (nng 1.5.2 can wait
 * forever, nanomsg/nng#1543) goes on on a thread of its own, its memory left to it. */
void mt_rpc_client_close(mt_rpc_client *cli);

/* The TLS settings the client was opened with (borrowed, valid until close; NULL when none),
 * for dialing the coordinator's other addresses (its metrics stream) the same way. */
const struct mt_tls *mt_rpc_client_tls(const mt_rpc_client *cli);

/*
 * Call svc's method `method` (short name, "ListWorkers") with `req` (borrowed) and
 * wait up to timeout_ms. On MT_OK *reply is the decoded reply (returns owned; free
 * with protobuf_c_message_free_unpacked(*reply, NULL)); otherwise *reply = NULL and
 * err holds the code and message (the server's, or DEADLINE_EXCEEDED / UNAVAILABLE
 * / INVALID_ARGUMENT for an undecodable reply). Thread-safe; blocks.
 */
mt_code mt_rpc_client_call(mt_rpc_client *cli, const ProtobufCServiceDescriptor *svc,
                           const char *method, const ProtobufCMessage *req,
                           ProtobufCMessage **reply, int timeout_ms, mt_err *err);

/*
 * Send raw request bytes (tests, fuzzing the server) and return the status the
 * server answered (decoded from its Reply envelope) in *server_code. The
 * function's own return is the transport status. Blocks.
 */
mt_code mt_rpc_client_call_raw(mt_rpc_client *cli, const void *bytes, size_t len, int timeout_ms,
                               mt_code *server_code, mt_err *err);

/* ---- request decoding (the server's checks as a pure function) ---- */

/* A decoded, checked request. */
typedef struct mt_rpc_request {
    const ProtobufCMethodDescriptor *method; /* in the service; NULL unless MT_OK */
    ProtobufCMessage *message;               /* owned; type method->input; NULL unless MT_OK */
    uint64_t request_id;                     /* set whenever the envelope decoded */
    uint32_t timeout_ms;                     /* the caller's time left; 0 = none */
} mt_rpc_request;

/*
 * Decode and check request bytes (borrowed) exactly as the server does, in this order:
 * larger than max_msg -> INVALID_ARGUMENT; not a meshtrain.rpc.Request -> INVALID_ARGUMENT;
 * another protocol major -> FAILED_PRECONDITION naming both versions; token set (not NULL or
 * "") and the credential differs -> UNAUTHENTICATED; method not in `service` -> UNIMPLEMENTED;
 * payload not a method->input -> INVALID_ARGUMENT. On MT_OK *out holds the method and the
 * decoded message (owned: release with mt_rpc_request_fini). On failure out->message is NULL
 * and out->request_id is set when the envelope decoded. Pure; any thread.
 */
mt_code mt_rpc_decode_request(const void *bytes, size_t len,
                              const ProtobufCServiceDescriptor *service, const char *token,
                              size_t max_msg, mt_rpc_request *out, mt_err *err);

/* Free the decoded message and zero *r; NULL or zeroed memory is a no-op. */
void mt_rpc_request_fini(mt_rpc_request *r);

/* ---- shared helpers ---- */

/*
 * Read a token file: the first line, trailing whitespace removed, 1..255 bytes.
 * The file must not be readable by group or others (PERMISSION_DENIED naming the
 * mode, as ssh does for keys). NOT_FOUND when missing, INVALID_ARGUMENT when empty.
 */
mt_code mt_rpc_token_load(const char *path, char out[MT_RPC_TOKEN_MAX], mt_err *err);

/* Compare two tokens in time independent of where they differ. 1 when equal. */
int mt_rpc_token_equal(const char *a, const char *b);

/* Translate an nng error number into an mt_code (for other modules using nng). */
mt_code mt_rpc_code_from_nng(int nng_rv);

#endif
