/* SPDX-License-Identifier: MIT */
/*
 * mt_store_upload.h — durable file uploads under the coordinator's state dir:
 * checkpoint files that workers send in chunks (PutCheckpointChunk) are
 * written to a temporary file, verified (size, crc32), fsynced, renamed into
 * place and the directory fsynced — only then does the caller record them
 * complete in the store (mt_store_checkpoint_complete). A checkpoint thus
 * survives the loss of the worker that wrote it, and a crash at any point
 * leaves either the previous file or the complete new one, never a torn one.
 * Also: reading a stored file back in chunks (GetCheckpointChunk).
 *
 * Threading: an upload is used by one thread at a time. Every call blocks on
 * file I/O (write, and fsync in finish); the coordinator may run finish on a
 * pool thread (uv_queue_work) when files are large.
 * Tests: tests/unit/test_store_upload.c.
 */
#ifndef MT_STORE_UPLOAD_H
#define MT_STORE_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

typedef struct mt_store_upload mt_store_upload;

/*
 * Start receiving final_path (borrowed; its directory is created with parents,
 * mode 0755, when missing). Data goes to "<final_path>.part", created or
 * truncated. max_bytes (0 = unlimited) bounds the total size.
 * On OK *out is owned (mt_store_upload_close). On failure *out = NULL.
 * Codes: INVALID_ARGUMENT (NULL/empty path), PERMISSION_DENIED, NOT_FOUND,
 * RESOURCE_EXHAUSTED (no space, out of memory), UNAVAILABLE (other I/O errors);
 * messages name the path and keep strerror's text.
 */
mt_code mt_store_upload_open(const char *final_path, uint64_t max_bytes, mt_store_upload **out,
                             mt_err *err);

/*
 * Write a chunk at offset (borrows data). Chunks must arrive in order: offset
 * == mt_store_upload_received(). A retried chunk that lies entirely before the
 * received end is accepted and ignored; one that overlaps the end contributes
 * only its new bytes. Codes: OUT_OF_RANGE (offset beyond the received end: a
 * chunk is missing), RESOURCE_EXHAUSTED (past max_bytes, disk full),
 * FAILED_PRECONDITION (already finished or failed), UNAVAILABLE (I/O error).
 * After an I/O error the upload is failed: close it.
 */
mt_code mt_store_upload_write(mt_store_upload *u, uint64_t offset, const void *data, size_t len,
                              mt_err *err);

/* Bytes received so far (the next expected offset). */
uint64_t mt_store_upload_received(const mt_store_upload *u);

/* "crc32:xxxxxxxx" (zlib crc32, lower-case hex) of the bytes received so far, into buf[cap]
 * (cap >= 15). The format mt_store_upload_finish verifies and the store records. */
void mt_store_upload_checksum(const mt_store_upload *u, char *buf, size_t cap);

/*
 * Verify and publish: the received size must equal total_size and, when
 * checksum is non-NULL and non-empty, it must equal mt_store_upload_checksum
 * ("crc32:..." only). Then fsync the file, rename it over final_path and fsync
 * the directory. Codes: DATA_LOSS (size or checksum mismatch: the temporary
 * file is removed), INVALID_ARGUMENT (a checksum in another format),
 * FAILED_PRECONDITION (finished already or failed), UNAVAILABLE / RESOURCE_EXHAUSTED
 * (I/O). On any failure the temporary file is removed and final_path untouched.
 */
mt_code mt_store_upload_finish(mt_store_upload *u, uint64_t total_size, const char *checksum,
                               mt_err *err);

/* Close the upload; if it was not finished, remove the temporary file. NULL is a no-op. */
void mt_store_upload_close(mt_store_upload *u);

/*
 * Read up to cap bytes of the file at path from offset into buf (a chunk for
 * GetCheckpointChunk). *n gets the bytes read (0 at or past the end) and
 * *total_size (may be NULL) the file size. Codes: NOT_FOUND, PERMISSION_DENIED,
 * UNAVAILABLE (I/O), INVALID_ARGUMENT (NULL arguments).
 */
mt_code mt_store_file_read_at(const char *path, uint64_t offset, void *buf, size_t cap, size_t *n,
                              uint64_t *total_size, mt_err *err);

/*
 * Check that the file at path has size bytes and the checksum ("crc32:<8 hex>") recorded for
 * it: reads the whole file (blocking; a pool thread). Codes: NOT_FOUND (no file), DATA_LOSS
 * ("has N bytes, M recorded" / "crc32:xxxxxxxx, recorded crc32:yyyyyyyy"), INVALID_ARGUMENT (a
 * checksum that is not crc32), PERMISSION_DENIED, UNAVAILABLE (I/O).
 */
mt_code mt_store_file_verify(const char *path, uint64_t size, const char *checksum, mt_err *err);

#endif