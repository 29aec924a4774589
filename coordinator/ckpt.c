/* SPDX-License-Identifier: MIT */
/*
 * ckpt.c — checkpoint data kept by the coordinator: PutCheckpointChunk, ListCheckpoints,
 * GetCheckpointChunk, keep-N garbage collection.
 *
 * An upload is a sequence of chunks of one (job, step) with contiguous offsets from 0. The file
 * mechanics are storage/mt_store_upload.h: chunks go to STATE_DIR/checkpoints/<job>/
 * step-<S>.ckpt.part with a running CRC-32; the last chunk must bring the size to total_size
 * and the CRC to `checksum` ("crc32:%08x"), else the upload is discarded (DATA_LOSS); then the
 * file is fsynced, renamed to step-<S>.ckpt and the directory fsynced. On the loop thread the
 * first chunk records the checkpoint (incomplete) and the last one marks it complete and
 * deletes the files of complete checkpoints beyond the spec's checkpoint.keep (default 3), but
 * not the best one (validation.best: the step of the job's latest "best_step" point).
 * Only then is the last chunk acknowledged, so a checkpoint the worker saw acknowledged
 * survives kill -9 and the loss of that worker.
 *
 * Threading: the writes and the final fsync run on libuv's thread pool, one chunk of an upload
 * at a time (a chunk that arrives while the previous one is being written is refused with
 * FAILED_PRECONDITION: workers send the next chunk after the reply); the upload table and the
 * store records are the loop thread's. Reads (List, GetChunk) run on the pool (bulk.c).
 * A coordinator restart forgets uploads in progress: the worker restarts them at offset 0, and
 * the files no complete record names (cut uploads, gc'd files a crash left) are deleted at start
 * (coord_ckpt_sweep_orphans).
 */
#include "coordinator/coord_rpc.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"
#include "storage/mt_store_upload.h"

#define DEFAULT_CHUNK (4u << 20)
#define MAX_CHUNK     (16u << 20)

struct coord_upload {
    struct coord_upload *next;
    char job_id[32];
    uint64_t step;
    mt_store_upload *up;
    int busy; /* a chunk is being written on the pool */
    char path[512];
};

/* One chunk on its way through the pool. */
typedef struct chunk_req {
    uv_work_t work;
    mt_coord *c;
    mt_rpc_call *call;
    struct coord_upload *u;
    mt_code rc;
    mt_err err;
    char checksum[32]; /* of the whole file, when last */
    bool has_root;     /* when last: the file's recorded state root (the step's state digest) */
    char root[MT_DIGEST_HEX];
} chunk_req;

static struct coord_upload *upload_find(mt_coord *c, const char *job_id, uint64_t step)
{
    for (struct coord_upload *u = c->uploads; u != NULL; u = u->next)
        if (u->step == step && strcmp(u->job_id, job_id) == 0)
            return u;
    return NULL;
}

static void upload_drop(mt_coord *c, struct coord_upload *u)
{
    for (struct coord_upload **p = &c->uploads; *p != NULL; p = &(*p)->next) {
        if (*p == u) {
            *p = u->next;
            break;
        }
    }
    mt_store_upload_close(u->up); /* removes the temporary file unless finished */
    mt_free(u);
}

void coord_ckpt_free(mt_coord *c)
{
    while (c->uploads != NULL)
        upload_drop(c, c->uploads);
}

/* An upload that failed leaves no pending record (the next interval's checkpoint is another
 * step; a retry of this one records it again). */
static void upload_forget(mt_coord *c, const char *job_id, uint64_t step)
{
    mt_err err = MT_ERR_INIT;

    if (mt_store_checkpoint_drop_incomplete(c->store, job_id, step, &err) != MT_OK)
        mt_log_error("checkpoint %s step %" PRIu64 ": %s", job_id, step, err.msg);
}

/* What the uploading worker (and, through its task error, anyone reading the job's status) is
 * told when the coordinator could not store a chunk: the machine at fault and the cause, never
 * the coordinator's own paths; the full message goes to the coordinator's log. */
static mt_code upload_failure(mt_coord *c, const char *job_id, uint64_t step, mt_code rc,
                              const mt_err *in, mt_err *out)
{
    char host[128] = "?";
    const char *why;
    coord_job *j;

    if (strstr(in->msg, c->state_dir) == NULL) /* no path of ours in it: pass it on */
        return mt_err_set(out, rc, "%s", in->msg);
    mt_log_warn("checkpoint %s step %" PRIu64 " not stored: %s: %s", job_id, step, mt_code_name(rc),
                in->msg);
    gethostname(host, sizeof(host) - 1);
    switch (rc) {
    case MT_RESOURCE_EXHAUSTED:
        why = "its disk is full";
        break;
    case MT_PERMISSION_DENIED:
        why = "its state directory is not writable";
        break;
    case MT_DATA_LOSS:
        why = "size or checksum mismatch (send it again)";
        break;
    default:
        why = "its state directory cannot be written";
        break;
    }
    mt_err_set(out, rc,
               "checkpoint step %" PRIu64 " of job %s not stored by the coordinator on %s: %s",
               step, job_id, host, why);
    if (rc == MT_RESOURCE_EXHAUSTED && (j = coord_job_find(c, job_id)) != NULL) {
        /* the worker skips this checkpoint and trains on (worker/task.c): say so in status */
        char note[256];
        snprintf(note, sizeof(note),
                 "checkpoint step %" PRIu64 " skipped: the coordinator's disk on %s is full "
                 "(the next checkpoint tries again)",
                 step, host);
        coord_job_note(c, j, note);
    }
    return rc;
}

static mt_code upload_start(mt_coord *c, const Meshtrain__PutCheckpointChunkRequest *r,
                            struct coord_upload **out, mt_err *err)
{
    struct coord_upload *u = upload_find(c, r->job_id, r->step);
    mt_store_checkpoint rec;
    mt_code rc;

    if (u != NULL && u->busy)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "a chunk of this upload is still being written");
    if (u != NULL)
        upload_drop(c, u); /* a retried upload starts over */
    u = mt_calloc(1, sizeof(*u));
    if (u == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    memset(&rec, 0, sizeof(rec));
    if (snprintf(u->path, sizeof(u->path), "%s/checkpoints/%s/step-%" PRIu64 ".ckpt", c->state_dir,
                 r->job_id, r->step) >= (int)sizeof(u->path)) {
        mt_free(u);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint path under %.100s is too long",
                          c->state_dir);
    }
    snprintf(u->job_id, sizeof(u->job_id), "%s", r->job_id);
    u->step = r->step;
    rec.step = r->step;
    memcpy(rec.location, u->path, sizeof(u->path));
    snprintf(rec.checksum, sizeof(rec.checksum), "pending");
    rec.size_bytes = r->total_size;
    rec.time_ms = mt_clock_wall_ms();
    if ((rc = mt_store_checkpoint_insert(c->store, r->job_id, &rec, err)) != MT_OK) {
        mt_free(u);
        return rc;
    }
    if ((rc = mt_store_upload_open(u->path, 0, &u->up, err)) != MT_OK) {
        upload_forget(c, r->job_id, r->step);
        mt_free(u);
        return rc;
    }
    u->next = c->uploads;
    c->uploads = u;
    *out = u;
    return MT_OK;
}

/* Pool thread: write the chunk; with the last one verify and publish the file. */
static void chunk_write(uv_work_t *w)
{
    chunk_req *q = w->data;
    const Meshtrain__PutCheckpointChunkRequest *r =
        (const Meshtrain__PutCheckpointChunkRequest *)mt_rpc_call_request(q->call);

    q->rc = mt_store_upload_write(q->u->up, r->offset, r->data.data, r->data.len, &q->err);
    if (q->rc == MT_OK && r->last) {
        mt_store_upload_checksum(q->u->up, q->checksum, sizeof(q->checksum));
        q->rc = mt_store_upload_finish(q->u->up, r->total_size, r->checksum, &q->err);
    }
    if (q->rc == MT_OK && r->last) { /* its state root: the digest of its step, kept even when
                                        the worker dies before reporting it (reproducibility.md) */
        mt_ckpt *ck = NULL;
        mt_digest d;
        if (mt_ckpt_open(q->u->path, &ck, NULL) == MT_OK &&
            mt_ckpt_root(ck, false, false, &d, NULL, NULL) == MT_OK) {
            mt_digest_hex(&d, q->root);
            q->has_root = true;
        }
        mt_ckpt_close(ck);
    }
}

/* Loop thread: record, collect garbage, reply. */
static void chunk_done(uv_work_t *w, int status)
{
    chunk_req *q = w->data;
    mt_coord *c = q->c;
    struct coord_upload *u = q->u;
    const Meshtrain__PutCheckpointChunkRequest *r =
        (const Meshtrain__PutCheckpointChunkRequest *)mt_rpc_call_request(q->call);
    Meshtrain__PutCheckpointChunkReply rep = MESHTRAIN__PUT_CHECKPOINT_CHUNK_REPLY__INIT;
    coord_job *j = coord_job_find(c, u->job_id);
    char **gone = NULL;
    size_t ngone = 0;

    u->busy = 0;
    if (status != 0)
        q->rc = mt_err_set(&q->err, MT_UNAVAILABLE, "coordinator shutting down");
    if (q->rc == MT_OK && r->last)
        q->rc = mt_store_checkpoint_complete(c->store, u->job_id, u->step,
                                             mt_store_upload_received(u->up), q->checksum,
                                             mt_clock_wall_ms(), &q->err);
    if (q->rc != MT_OK) {
        mt_err out = MT_ERR_INIT;
        if (r->last || q->rc != MT_OUT_OF_RANGE) { /* failed or torn: start over at offset 0 */
            upload_forget(c, u->job_id, u->step);
            upload_drop(c, u);
        }
        upload_failure(c, r->job_id, r->step, q->rc, &q->err, &out);
        mt_rpc_call_reply(q->call, q->rc, out.msg, NULL);
        mt_free(q);
        return;
    }
    rep.received = mt_store_upload_received(u->up);
    if (r->last && q->has_root) {
        mt_store_digest d = {.step = u->step, .time_ms = mt_clock_wall_ms()};
        mt_err derr = MT_ERR_INIT;
        memcpy(d.digest, q->root, sizeof(d.digest));
        /* stored, not published: the worker reports the same digest right after this reply,
         * and a live watcher must see each step once, in order */
        if (mt_store_job_digests_put(c->store, u->job_id, &d, 1, &derr) != MT_OK)
            mt_log_warn("job %s: state digest of checkpoint step %" PRIu64 ": %s", u->job_id,
                        u->step, derr.msg);
    }
    if (r->last) {
        mt_log_info("checkpoint %s step %" PRIu64 " stored: %" PRIu64 " bytes, %s", u->job_id,
                    u->step, rep.received, q->checksum);
        if (mt_store_checkpoint_gc(c->store, u->job_id, j ? j->sum.ckpt_keep : 3, &gone, &ngone,
                                   NULL) == MT_OK) {
            for (size_t i = 0; i < ngone; i++) {
                char model[4096]; /* its safetensors export, if the dashboard asked for it */
                if (unlink(gone[i]) != 0 && errno != ENOENT)
                    mt_log_warn("delete old checkpoint %s: %s", gone[i], strerror(errno));
                if (snprintf(model, sizeof(model), "%s.safetensors", gone[i]) < (int)sizeof(model))
                    (void)unlink(model);
            }
            mt_store_strings_free(gone, ngone);
        }
        upload_drop(c, u);
    }
    mt_rpc_call_reply(q->call, MT_OK, NULL, &rep.base);
    mt_free(q);
}

void coord_handle_put_checkpoint_chunk(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__PutCheckpointChunkRequest *r =
        (const Meshtrain__PutCheckpointChunkRequest *)mt_rpc_call_request(call);
    struct coord_upload *u = NULL;
    chunk_req *q;
    mt_err err = MT_ERR_INIT;
    mt_code rc = MT_OK;

    if (coord_job_find(c, r->job_id) == NULL) {
        mt_rpc_call_reply(call, MT_NOT_FOUND, "job is not running (unknown or finished)", NULL);
        return;
    }
    if (r->step == 0) {
        mt_rpc_call_reply(call, MT_INVALID_ARGUMENT, "step: must be >= 1", NULL);
        return;
    }
    if (r->offset == 0) {
        rc = upload_start(c, r, &u, &err);
    } else if ((u = upload_find(c, r->job_id, r->step)) == NULL) {
        rc = mt_err_set(&err, MT_FAILED_PRECONDITION,
                        "no upload of step %" PRIu64 " in progress: start again at offset 0",
                        r->step);
    } else if (u->busy) {
        rc = mt_err_set(&err, MT_FAILED_PRECONDITION,
                        "a chunk of this upload is still being written");
    }
    if (rc == MT_OK && (q = mt_calloc(1, sizeof(*q))) == NULL)
        rc = mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    if (rc != MT_OK) {
        mt_err out = MT_ERR_INIT;
        upload_failure(c, r->job_id, r->step, rc, &err, &out);
        mt_rpc_call_reply(call, rc, out.msg, NULL);
        return;
    }
    q->c = c;
    q->call = call;
    q->u = u;
    q->work.data = q;
    u->busy = 1;
    if (uv_queue_work(&c->loop, &q->work, chunk_write, chunk_done) != 0) {
        u->busy = 0;
        mt_free(q);
        mt_rpc_call_reply(call, MT_INTERNAL, "cannot queue the write", NULL);
    }
}

static void info_from(Meshtrain__CheckpointInfo *i, mt_store_checkpoint *k)
{
    meshtrain__checkpoint_info__init(i);
    i->step = k->step;
    i->location = k->location;
    i->size_bytes = k->size_bytes;
    i->checksum = k->checksum;
    i->complete = k->complete;
    i->time_ms = k->time_ms;
}

static void list_checkpoints_ro(const mt_coord *c, mt_store *ro, mt_rpc_call *call)
{
    const Meshtrain__ListCheckpointsRequest *r =
        (const Meshtrain__ListCheckpointsRequest *)mt_rpc_call_request(call);
    Meshtrain__ListCheckpointsReply rep = MESHTRAIN__LIST_CHECKPOINTS_REPLY__INIT;
    Meshtrain__CheckpointInfo *inf = NULL, **pinf = NULL;
    mt_store_checkpoint *ck = NULL;
    mt_store_job rec;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    (void)c;
    memset(&rec, 0, sizeof(rec));
    rc = mt_store_job_get(ro, r->job_id, &rec, &err);
    mt_store_job_fini(&rec);
    if (rc == MT_OK)
        rc = mt_store_checkpoint_list(ro, r->job_id, &ck, &n, &err);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    inf = mt_calloc(n + 1, sizeof(*inf));
    pinf = mt_calloc(n + 1, sizeof(*pinf));
    if (inf == NULL || pinf == NULL) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        info_from(&inf[i], &ck[i]);
        pinf[i] = &inf[i];
    }
    rep.checkpoints = pinf;
    rep.n_checkpoints = n;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out:
    mt_free(inf);
    mt_free(pinf);
    mt_store_checkpoints_free(ck);
}

/* ------------------------------------------------------------------ verification */

#define MAX_SKIPPED 4

/* What a newest-first check of a job's checkpoint files found. */
typedef struct ckpt_pick {
    bool found; /* good holds the newest complete checkpoint that verified */
    mt_store_checkpoint good;
    size_t n_bad; /* newer complete ones that did not verify (the first MAX_SKIPPED) */
    uint64_t bad_step[MAX_SKIPPED];
    char bad_why[MAX_SKIPPED][120];
} ckpt_pick;

/* Pool thread: check job_id's complete checkpoints newest first until one's file has its
 * recorded size and CRC. Reads whole files. */
static mt_code pick_verified(mt_store *ro, const char *job_id, ckpt_pick *p, mt_err *err)
{
    mt_store_checkpoint *ck = NULL;
    size_t n = 0;
    mt_code rc = mt_store_checkpoint_list(ro, job_id, &ck, &n, err);

    memset(p, 0, sizeof(*p));
    if (rc != MT_OK)
        return rc;
    for (size_t i = n; i-- > 0 && !p->found;) {
        mt_err verr = MT_ERR_INIT;
        if (!ck[i].complete)
            continue;
        if (mt_store_file_verify(ck[i].location, ck[i].size_bytes, ck[i].checksum, &verr) ==
            MT_OK) {
            p->good = ck[i];
            p->found = true;
        } else if (p->n_bad < MAX_SKIPPED) {
            /* NOT_FOUND names the coordinator's path: say "file missing" instead */
            p->bad_step[p->n_bad] = ck[i].step;
            snprintf(p->bad_why[p->n_bad], sizeof(p->bad_why[0]), "%.119s",
                     verr.code == MT_DATA_LOSS ? verr.msg : "its file is missing or unreadable");
            mt_log_warn("job %s: checkpoint step %" PRIu64 " (%s) does not verify: %s", job_id,
                        ck[i].step, ck[i].location, verr.msg);
            p->n_bad++;
        }
    }
    mt_store_checkpoints_free(ck);
    return MT_OK;
}

/* "checkpoint step 30 skipped: <why>; checkpoint step 20 skipped: ..." into out */
static void skipped_note(const ckpt_pick *p, char *out, size_t cap)
{
    size_t len = 0;

    out[0] = '\0';
    for (size_t i = 0; i < p->n_bad && len < cap; i++) {
        int k = snprintf(out + len, cap - len, "%scheckpoint step %" PRIu64 " skipped: %s",
                         i ? "; " : "", p->bad_step[i], p->bad_why[i]);
        if (k < 0)
            break;
        len += (size_t)k;
    }
}

typedef struct verify_req {
    uv_work_t work;
    mt_coord *c;
    char job_id[32];
    coord_ckpt_verified_fn done;
    ckpt_pick pick;
} verify_req;

static void verify_work(uv_work_t *w)
{
    verify_req *q = w->data;
    mt_err err = MT_ERR_INIT;
    mt_store *ro = coord_bulk_ro_take(q->c, &err);

    if (ro == NULL || pick_verified(ro, q->job_id, &q->pick, &err) != MT_OK)
        mt_log_warn("job %s: cannot check its checkpoints: %s", q->job_id, err.msg);
    if (ro != NULL)
        coord_bulk_ro_give(q->c, ro);
}

static void verify_done(uv_work_t *w, int status)
{
    verify_req *q = w->data;
    char note[200];

    (void)status;
    for (size_t i = 0; i < q->pick.n_bad; i++) {
        mt_err err = MT_ERR_INIT;
        if (mt_store_checkpoint_set_corrupt(q->c->store, q->job_id, q->pick.bad_step[i],
                                            mt_clock_wall_ms(), &err) != MT_OK)
            mt_log_error("job %s: mark checkpoint step %" PRIu64 ": %s", q->job_id,
                         q->pick.bad_step[i], err.msg);
    }
    skipped_note(&q->pick, note, sizeof(note));
    q->done(q->c, q->job_id, q->pick.found ? q->pick.good.step : 0, note);
    mt_free(q);
}

mt_code coord_ckpt_verify(mt_coord *c, const char *job_id, coord_ckpt_verified_fn done, mt_err *err)
{
    verify_req *q = mt_calloc(1, sizeof(*q));

    if (q == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    q->c = c;
    q->done = done;
    snprintf(q->job_id, sizeof(q->job_id), "%s", job_id);
    q->work.data = q;
    if (uv_queue_work(&c->loop, &q->work, verify_work, verify_done) != 0) {
        mt_free(q);
        return mt_err_set(err, MT_INTERNAL, "cannot queue the checkpoint check of job %s", job_id);
    }
    return MT_OK;
}

/* Step 0 asks for the newest complete checkpoint: at offset 0 (the client then pins the step)
 * that is the newest whose file verifies, and the reply says which newer ones were skipped. */
static void get_checkpoint_chunk_ro(const mt_coord *c, mt_store *ro, mt_rpc_call *call)
{
    const Meshtrain__GetCheckpointChunkRequest *r =
        (const Meshtrain__GetCheckpointChunkRequest *)mt_rpc_call_request(call);
    Meshtrain__GetCheckpointChunkReply rep = MESHTRAIN__GET_CHECKPOINT_CHUNK_REPLY__INIT;
    mt_store_checkpoint k;
    ckpt_pick pick;
    char skipped[200] = "";
    size_t want = r->max_bytes ? r->max_bytes : DEFAULT_CHUNK, got = 0;
    uint64_t total = 0;
    uint8_t *buf = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    (void)c;
    if (want > MAX_CHUNK)
        want = MAX_CHUNK;
    if (r->step == 0 && r->offset == 0) {
        rc = pick_verified(ro, r->job_id, &pick, &err);
        if (rc == MT_OK && !pick.found)
            rc = mt_err_set(&err, pick.n_bad ? MT_DATA_LOSS : MT_NOT_FOUND,
                            "job %s has no complete checkpoint%s", r->job_id,
                            pick.n_bad ? " whose file verifies" : "");
        if (rc == MT_OK)
            k = pick.good;
        skipped_note(&pick, skipped, sizeof(skipped));
    } else if (r->step == 0)
        rc = mt_store_checkpoint_latest(ro, r->job_id, &k, &err);
    else
        rc = mt_store_checkpoint_get(ro, r->job_id, r->step, &k, &err);
    if (rc == MT_OK && !k.complete)
        rc = mt_err_set(&err, MT_FAILED_PRECONDITION,
                        "checkpoint %s step %" PRIu64 " is still being uploaded", r->job_id,
                        r->step);
    if (rc == MT_OK && r->offset > k.size_bytes)
        rc = mt_err_set(&err, MT_OUT_OF_RANGE, "offset %" PRIu64 " is past the end (%" PRIu64 ")",
                        r->offset, k.size_bytes);
    if (rc == MT_OK && (buf = mt_malloc(want + 1)) == NULL)
        rc = mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    if (rc == MT_OK)
        rc = mt_store_file_read_at(k.location, r->offset, buf, want, &got, &total, &err);
    if (rc == MT_OK && total != k.size_bytes)
        rc = mt_err_set(&err, MT_DATA_LOSS,
                        "checkpoint %s step %" PRIu64 ": file has %" PRIu64 " bytes, %" PRIu64
                        " recorded",
                        r->job_id, k.step, total, k.size_bytes);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        mt_free(buf);
        return;
    }
    rep.step = k.step;
    rep.skipped = skipped;
    rep.total_size = k.size_bytes;
    rep.data.data = buf;
    rep.data.len = got;
    rep.last = r->offset + got >= k.size_bytes;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
    mt_free(buf);
}

void coord_handle_list_checkpoints(mt_coord *c, mt_rpc_call *call)
{
    coord_bulk(c, call, list_checkpoints_ro);
}

void coord_handle_get_checkpoint_chunk(mt_coord *c, mt_rpc_call *call)
{
    coord_bulk(c, call, get_checkpoint_chunk_ro);
}

/* Delete the files in dir (the checkpoint directory of job_id, a job the store knows) whose name
 * is not the file name of one of the job's complete checkpoint records. Names are compared, not
 * whole paths, so a state directory given under another spelling deletes nothing it should keep. */
static size_t sweep_job_dir(mt_coord *c, const char *job_id, const char *dir)
{
    mt_store_checkpoint *recs = NULL;
    size_t nrec = 0, gone = 0;
    mt_store_job job;
    mt_err err = MT_ERR_INIT;
    char path[1024];
    struct dirent *e;
    DIR *d;

    if (mt_store_job_get(c->store, job_id, &job, &err) != MT_OK) {
        mt_log_warn("checkpoint sweep: %s left alone: %s", dir, err.msg);
        return 0;
    }
    mt_store_job_fini(&job);
    if (mt_store_checkpoint_list(c->store, job_id, &recs, &nrec, &err) != MT_OK) {
        mt_log_warn("checkpoint sweep of %s: %s", dir, err.msg);
        return 0;
    }
    if ((d = opendir(dir)) == NULL) {
        mt_store_checkpoints_free(recs);
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        int named = 0;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
            continue;
        for (size_t i = 0; i < nrec && !named; i++) {
            const char *base = strrchr(recs[i].location, '/');
            named = recs[i].complete &&
                    strcmp(base != NULL ? base + 1 : recs[i].location, e->d_name) == 0;
        }
        if (named)
            continue;
        if (unlink(path) == 0) {
            mt_log_info("deleted orphan checkpoint file %s (no complete checkpoint names it)",
                        path);
            gone++;
        } else if (errno != ENOENT) {
            mt_log_warn("delete orphan checkpoint file %s: %s", path, strerror(errno));
        }
    }
    closedir(d);
    mt_store_checkpoints_free(recs);
    return gone;
}

size_t coord_ckpt_sweep_orphans(mt_coord *c)
{
    char root[600], dir[1024];
    struct dirent *e;
    size_t gone = 0;
    DIR *d;

    if (snprintf(root, sizeof(root), "%s/checkpoints", c->state_dir) >= (int)sizeof(root) ||
        (d = opendir(root)) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(((struct coord_upload *)0)->job_id))
            continue;
        if (snprintf(dir, sizeof(dir), "%s/%s", root, e->d_name) >= (int)sizeof(dir))
            continue;
        gone += sweep_job_dir(c, e->d_name, dir);
    }
    closedir(d);
    return gone;
}
