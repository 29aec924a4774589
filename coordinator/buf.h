/* SPDX-License-Identifier: MIT */
/*
 * buf.h — a growable NUL-terminated text buffer with JSON helpers (buf.c), shared by the
 * coordinator's HTTP endpoints, its metrics cache and its process metrics. A leaf module.
 * Threading: one thread per buffer at a time.
 */
#ifndef MT_COORD_BUF_H
#define MT_COORD_BUF_H

#include <stddef.h>
#include <stdint.h>

/* A growable NUL-terminated byte buffer. Zero-initialise; release with coord_buf_fini. */
typedef struct coord_buf {
    char *data;
    size_t len, cap;
    int oom; /* an append failed: the content is incomplete */
} coord_buf;

void coord_buf_fini(coord_buf *b);
void coord_buf_add(coord_buf *b, const char *s, size_t n);
void coord_buf_puts(coord_buf *b, const char *s);
void coord_buf_printf(coord_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s as a JSON string literal (quotes and escapes). */
void coord_buf_json_str(coord_buf *b, const char *s);
/* Append a double as JSON with 9 significant digits (null for NaN and infinities). */
void coord_buf_json_num(coord_buf *b, double v);
/* Append an unsigned decimal integer. */
void coord_buf_u64(coord_buf *b, uint64_t v);

#endif
