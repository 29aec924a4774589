/* SPDX-License-Identifier: MIT */
/*
 * buf.c — the growable text buffer (buf.h) the coordinator builds JSON and Prometheus text in:
 * the HTTP endpoints (http_api.c, http_prom.c), the metrics cache (mcache.c) and the process
 * metrics (stats.c). A leaf: it calls nothing else of the coordinator.
 * Threading: a buffer belongs to one thread at a time; no shared state.
 * Tests: tests/unit/test_mcache.c (byte-for-byte answers), bench/bench_http.c (the number path).
 */
#include "coordinator/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"

static void buf_reserve(coord_buf *b, size_t extra)
{
    size_t cap;
    char *p;

    if (b->oom || b->len + extra + 1 <= b->cap)
        return;
    cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    p = mt_realloc(b->data, cap);
    if (p == NULL) {
        b->oom = 1;
        return;
    }
    b->data = p;
    b->cap = cap;
}

void coord_buf_fini(coord_buf *b)
{
    mt_free(b->data);
    memset(b, 0, sizeof(*b));
}

void coord_buf_add(coord_buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void coord_buf_puts(coord_buf *b, const char *s)
{
    coord_buf_add(b, s, strlen(s));
}

void coord_buf_printf(coord_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    buf_reserve(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void coord_buf_json_str(coord_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";

    coord_buf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            coord_buf_add(b, e, 2);
        } else if (*p < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
            coord_buf_add(b, e, 6);
        } else {
            coord_buf_add(b, (const char *)p, 1);
        }
    }
    coord_buf_add(b, "\"", 1);
}

/*
 * The hot path of the metric history (100,000 values per answer): v with 9 significant
 * digits in plain decimal notation, trailing zeros removed, like printf's "%.9g" for
 * 1e-5 <= |v| < 1e9 (the range of losses, accuracies and throughputs); returns the
 * length written to out (>= 32 bytes), or 0 outside that range so the caller uses printf.
 * About 6x faster than snprintf (bench/bench_http.c). The last digit may differ from
 * printf's by one unit in the 9th place (the scaling multiplies by a power of ten).
 */
static int fmt_g9(char *out, double v)
{
    static const double p10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6, 1e7,
                                 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14};
    double a = v < 0 ? -v : v;
    char digits[9];
    int len = 0, e, nd, point;
    uint64_t m;

    if (a == 0.0) {
        out[0] = '0';
        return 1;
    }
    if (!(a >= 1e-5 && a < 1e9))
        return 0;
    if (a >= 1.0) { /* e = floor(log10(a)) in -5..8 */
        for (e = 0; e < 8 && a >= p10[e + 1];)
            e++;
    } else {
        for (e = -1; e > -5 && a * p10[-e] < 1.0;)
            e--;
    }
    m = (uint64_t)(a * p10[8 - e] + 0.5); /* the 9 significant digits */
    if (m >= 1000000000ull) {             /* rounding carried: 9.9999999995 -> 10.0000000 */
        m = (m + 5) / 10;
        e++;
    }
    if (m < 100000000ull || m >= 1000000000ull || e > 8)
        return 0;
    for (int i = 8; i >= 0; i--, m /= 10)
        digits[i] = (char)('0' + m % 10);
    point = e + 1; /* digits before the decimal point; <= 0 means "0.000ddd" */
    nd = 9;
    while (nd > 1 && nd > point && digits[nd - 1] == '0')
        nd--;
    if (v < 0)
        out[len++] = '-';
    if (point <= 0) {
        out[len++] = '0';
        out[len++] = '.';
        for (int i = point; i < 0; i++)
            out[len++] = '0';
    }
    for (int i = 0; i < nd; i++) {
        if (i == point && point > 0)
            out[len++] = '.';
        out[len++] = digits[i];
    }
    return len;
}

void coord_buf_json_num(coord_buf *b, double v)
{
    int n;

    if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
        coord_buf_add(b, "null", 4);
        return;
    }
    buf_reserve(b, 32);
    if (b->oom)
        return;
    n = fmt_g9(b->data + b->len, v);
    if (n <= 0) /* outside the fast path's range: printf */
        n = snprintf(b->data + b->len, 32, "%.9g", v);
    if (n > 0 && n < 32)
        b->len += (size_t)n;
    b->data[b->len] = '\0';
}

void coord_buf_u64(coord_buf *b, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);

    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    coord_buf_add(b, tmp + i, sizeof(tmp) - i);
}
