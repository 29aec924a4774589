/* SPDX-License-Identifier: MIT */
/*
 * ckpt.c — checkpoint data kept by the coordinator: PutCheckpointChunk, ListCheckpoints,
 * GetCheckpointChunk, keep-N garbage collection. Loop thread only.
 *
 * An upload is a sequence of chunks of one (job, step), offsets contiguous from 0. The first
 * chunk creates STATE_DIR/checkpoints/<job>/.step-<S>.tmp and an incomplete store record; each
 * chunk is written at its offset and folded into a running CRC-32; the last chunk must bring the
 * size to total_size and the CRC to `checksum` ("crc32:%08x", lower-case hex), else the upload
 * is discarded (DATA_LOSS). Then: fsync the file, rename it to step-<S>.ckpt, fsync the
 * directory, mark the record complete, and delete the files of complete checkpoints beyond the
 * spec's checkpoint.keep (default 3). Only then is the last chunk acknowledged, so a checkpoint
 * the worker saw acknowledged survives kill -9 and the loss of that worker.
 * A coordinator restart forgets uploads in progress: the worker restarts them at offset 0.
 * Limits: writes and the final fsync run on the loop thread (chunks are at most the RPC message
 * size); moving them to the thread pool is the hardening issue's (#10).
 */
#include "coordinator/coord_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

#define DEFAULT_CHUNK (4u << 20)
#define MAX_CHUNK     (16u << 20)

struct coord_upload {
    struct coord_upload *next;
    char job_id[32];
    uint64_t step;
    int fd;
    uint64_t received; /* bytes written so far = the next expected offset */
    uLong crc;
    char tmp[1100];
    char path[1100];
};

static struct coord_upload *upload_find(mt_coord *c, const char *job_id, uint64_t step)
{
    for (struct coord_upload *u = c->uploads; u != NULL; u = u->next)
        if (u->step == step && strcmp(u->job_id, job_id) == 0)
            return u;
    return NULL;
}

static void upload_drop(mt_coord *c, struct coord_upload *u, int unlink_tmp)
{
    for (struct coord_upload **p = &c->uploads; *p != NULL; p = &(*p)->next) {
        if (*p == u) {
            *p = u->next;
            break;
        }
    }
    if (u->fd >= 0)
        close(u->fd);
    if (unlink_tmp)
        unlink(u->tmp);
    mt_free(u);
}

void coord_ckpt_free(mt_coord *c)
{
    while (c->uploads != NULL)
        upload_drop(c, c->uploads, 1);
}

static mt_code fsync_dir(const char *dir, mt_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);

    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return mt_err_set(err, MT_INTERNAL, "fsync %s: %s", dir, strerror(e));
    }
    close(fd);
    return MT_OK;
}

static mt_code upload_start(mt_coord *c, const Meshtrain__PutCheckpointChunkRequest *r,
                            struct coord_upload **out, mt_err *err)
{
    struct coord_upload *u = upload_find(c, r->job_id, r->step);
    mt_store_checkpoint rec;
    char dir[1100];
    mt_code rc;

    if (u != NULL)
        upload_drop(c, u, 1); /* a retried upload starts over */
    snprintf(dir, sizeof(dir), "%s/checkpoints", c->state_dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return mt_err_set(err, MT_INTERNAL, "create %s: %s", dir, strerror(errno));
    snprintf(dir, sizeof(dir), "%s/checkpoints/%s", c->state_dir, r->job_id);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return mt_err_set(err, MT_INTERNAL, "create %s: %s", dir, strerror(errno));
    u = mt_calloc(1, sizeof(*u));
    if (u == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator out of memory");
    snprintf(u->job_id, sizeof(u->job_id), "%s", r->job_id);
    u->step = r->step;
    u->crc = crc32(0L, Z_NULL, 0);
    memset(&rec, 0, sizeof(rec));
    if (snprintf(u->tmp, sizeof(u->tmp), "%s/.step-%" PRIu64 ".tmp", dir, r->step) >=
            (int)sizeof(u->tmp) ||
        snprintf(u->path, sizeof(u->path), "%s/step-%" PRIu64 ".ckpt", dir, r->step) >=
            (int)sizeof(u->path) ||
        snprintf(rec.location, sizeof(rec.location), "%s", u->path) >= (int)sizeof(rec.location)) {
        mt_free(u);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint path under %.100s is too long",
                          dir);
    }
    rec.step = r->step;
    snprintf(rec.checksum, sizeof(rec.checksum), "pending");
    rec.size_bytes = r->total_size;
    if ((rc = mt_store_checkpoint_insert(c->store, r->job_id, &rec, err)) != MT_OK) {
        mt_free(u);
        return rc;
    }
    u->fd = open(u->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (u->fd < 0) {
        rc = mt_err_set(err, MT_INTERNAL, "create %s: %s", u->tmp, strerror(errno));
        mt_free(u);
        return rc;
    }
    u->next = c->uploads;
    c->uploads = u;
    *out = u;
    return MT_OK;
}

/* The last chunk arrived: verify, make durable, record, collect garbage. Drops u. */
static mt_code upload_finish(mt_coord *c, struct coord_upload *u, coord_job *j,
                             const Meshtrain__PutCheckpointChunkRequest *r, mt_err *err)
{
    char want[32], dir[1100];
    char **gone = NULL;
    size_t ngone = 0;
    mt_code rc;

    snprintf(want, sizeof(want), "crc32:%08lx", (unsigned long)u->crc);
    if (u->received != r->total_size) {
        rc = mt_err_set(err, MT_DATA_LOSS,
                        "checkpoint %s step %" PRIu64 ": received %" PRIu64
                        " bytes but total_size is %" PRIu64 "; upload discarded",
                        u->job_id, u->step, u->received, r->total_size);
        upload_drop(c, u, 1);
        return rc;
    }
    if (strcmp(r->checksum, want) != 0) {
        rc = mt_err_set(err,
                        r->checksum[0] && strncmp(r->checksum, "crc32:", 6) != 0
                            ? MT_INVALID_ARGUMENT
                            : MT_DATA_LOSS,
                        "checkpoint %s step %" PRIu64 ": checksum '%.40s' does not match the "
                        "data (%s); upload discarded",
                        u->job_id, u->step, r->checksum, want);
        upload_drop(c, u, 1);
        return rc;
    }
    if (fsync(u->fd) != 0 || rename(u->tmp, u->path) != 0) {
        rc = mt_err_set(err, MT_INTERNAL, "store checkpoint %s: %s", u->path, strerror(errno));
        upload_drop(c, u, 1);
        return rc;
    }
    snprintf(dir, sizeof(dir), "%s/checkpoints/%s", c->state_dir, u->job_id);
    if ((rc = fsync_dir(dir, err)) != MT_OK ||
        (rc = mt_store_checkpoint_complete(c->store, u->job_id, u->step, u->received, want,
                                           mt_clock_wall_ms(), err)) != MT_OK) {
        upload_drop(c, u, 0);
        return rc;
    }
    mt_log_info("checkpoint %s step %" PRIu64 " stored: %" PRIu64 " bytes, %s", u->job_id, u->step,
                u->received, want);
    if (mt_store_checkpoint_gc(c->store, u->job_id, j ? j->sum.ckpt_keep : 3, &gone, &ngone,
                               NULL) == MT_OK) {
        for (size_t i = 0; i < ngone; i++)
            if (unlink(gone[i]) != 0 && errno != ENOENT)
                mt_log_warn("delete old checkpoint %s: %s", gone[i], strerror(errno));
        mt_store_strings_free(gone, ngone);
    }
    upload_drop(c, u, 0);
    return MT_OK;
}

void coord_handle_put_checkpoint_chunk(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__PutCheckpointChunkRequest *r =
        (const Meshtrain__PutCheckpointChunkRequest *)mt_rpc_call_request(call);
    Meshtrain__PutCheckpointChunkReply rep = MESHTRAIN__PUT_CHECKPOINT_CHUNK_REPLY__INIT;
    coord_job *j = coord_job_find(c, r->job_id);
    struct coord_upload *u = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code rc = MT_OK;

    if (j == NULL) {
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
    } else if (r->offset != u->received) {
        rc = mt_err_set(&err, MT_FAILED_PRECONDITION,
                        "offset %" PRIu64 ": expected %" PRIu64 " (chunks must be contiguous)",
                        r->offset, u->received);
    }
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    if (r->data.len > 0) {
        size_t done = 0;
        while (done < r->data.len) {
            ssize_t w =
                pwrite(u->fd, r->data.data + done, r->data.len - done, (off_t)(u->received + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = mt_err_set(&err, errno == ENOSPC ? MT_RESOURCE_EXHAUSTED : MT_INTERNAL,
                                "write %s: %s", u->tmp, strerror(errno));
                upload_drop(c, u, 1);
                mt_rpc_call_reply(call, rc, err.msg, NULL);
                return;
            }
            done += (size_t)w;
        }
        u->crc = crc32(u->crc, r->data.data, (uInt)r->data.len);
        u->received += r->data.len;
    }
    rep.received = u->received;
    if (r->last && (rc = upload_finish(c, u, j, r, &err)) != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
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

void coord_handle_list_checkpoints(mt_coord *c, mt_rpc_call *call)
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

    memset(&rec, 0, sizeof(rec));
    rc = mt_store_job_get(c->store, r->job_id, &rec, &err);
    mt_store_job_fini(&rec);
    if (rc == MT_OK)
        rc = mt_store_checkpoint_list(c->store, r->job_id, &ck, &n, &err);
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

void coord_handle_get_checkpoint_chunk(mt_coord *c, mt_rpc_call *call)
{
    const Meshtrain__GetCheckpointChunkRequest *r =
        (const Meshtrain__GetCheckpointChunkRequest *)mt_rpc_call_request(call);
    Meshtrain__GetCheckpointChunkReply rep = MESHTRAIN__GET_CHECKPOINT_CHUNK_REPLY__INIT;
    mt_store_checkpoint k;
    size_t want = r->max_bytes ? r->max_bytes : DEFAULT_CHUNK;
    uint8_t *buf = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    ssize_t got;
    int fd;

    if (want > MAX_CHUNK)
        want = MAX_CHUNK;
    if (r->step == 0)
        rc = mt_store_checkpoint_latest(c->store, r->job_id, &k, &err);
    else
        rc = mt_store_checkpoint_get(c->store, r->job_id, r->step, &k, &err);
    if (rc == MT_OK && !k.complete)
        rc = mt_err_set(&err, MT_FAILED_PRECONDITION,
                        "checkpoint %s step %" PRIu64 " is still being uploaded", r->job_id,
                        r->step);
    if (rc != MT_OK) {
        mt_rpc_call_reply(call, rc, err.msg, NULL);
        return;
    }
    if (r->offset > k.size_bytes) {
        snprintf(err.msg, sizeof(err.msg), "offset %" PRIu64 " is past the end (%" PRIu64 ")",
                 r->offset, k.size_bytes);
        mt_rpc_call_reply(call, MT_OUT_OF_RANGE, err.msg, NULL);
        return;
    }
    if (want > k.size_bytes - r->offset)
        want = (size_t)(k.size_bytes - r->offset);
    buf = mt_malloc(want + 1);
    fd = open(k.location, O_RDONLY | O_CLOEXEC);
    if (buf == NULL || fd < 0) {
        snprintf(err.msg, sizeof(err.msg), "read %.180s: %s", k.location,
                 buf == NULL ? "out of memory" : strerror(errno));
        mt_rpc_call_reply(call, buf == NULL ? MT_RESOURCE_EXHAUSTED : MT_DATA_LOSS, err.msg, NULL);
        goto out_fd;
    }
    got = pread(fd, buf, want, (off_t)r->offset);
    if (got != (ssize_t)want) {
        snprintf(err.msg, sizeof(err.msg), "read %.180s: short read at %" PRIu64, k.location,
                 r->offset);
        mt_rpc_call_reply(call, MT_DATA_LOSS, err.msg, NULL);
        goto out_fd;
    }
    rep.step = k.step;
    rep.total_size = k.size_bytes;
    rep.data.data = buf;
    rep.data.len = want;
    rep.last = r->offset + want >= k.size_bytes;
    mt_rpc_call_reply(call, MT_OK, NULL, &rep.base);
out_fd:
    if (fd >= 0)
        close(fd);
    mt_free(buf);
}
