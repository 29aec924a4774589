/* SPDX-License-Identifier: MIT */
/*
 * data_text.c — labelled text source, tokenizer and TF-IDF vectorizer (Keras semantics).
 *
 * Called through mt_data__text_source by the dataset layer, by the training engine to fit the
 * vectorizer on the training split (mt_data_tfidf_fit_spec) and by prediction to reuse a stored
 * one (mt_data_tfidf_load). Inputs: `label<TAB>text` lines (empty lines skipped; the label an
 * integer) or a directory whose sub-directories are the labels (sorted by name; label = index)
 * holding one document per regular file.
 *
 * DESIGN: Keras TextVectorization(output_mode="tf_idf", max_tokens=M) reserves index 0 for OOV,
 * ranks terms by total count over the adapted documents, and weights term j of a document by
 * count_j × idf_j with idf = ln(1 + num_docs / (1 + doc_freq)); OOV gets the mean idf. We do the
 * same; differences (documented in docs/input-pipeline.md): the tokenizer splits on
 * non-alphanumerics ("don't" → "don", "t") where Keras strips punctuation and splits on
 * whitespace ("dont"), and ties in count are broken by byte order of the term.
 * Invariants: a vectorizer is immutable once built; term i <-> index i is a bijection.
 * Threading: stateless functions; vectorizers may be shared. Tests: tests/unit/test_data_text.c;
 * fuzz: tests/fuzz/fuzz_text.c.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

/* ------------------------------------------------------------------ tokenizer */

static int is_tok(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch >= 0x80;
}

void mt_data_tokenize(const char *text, size_t len, char *scratch, mt_data_token_fn fn, void *ctx)
{
    size_t i = 0;
    while (i < len) {
        size_t n = 0;
        while (i < len && !is_tok((unsigned char)text[i]))
            i++;
        while (i < len && is_tok((unsigned char)text[i])) {
            char ch = text[i++];
            scratch[n++] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
        }
        if (n > 0)
            fn(scratch, n, ctx);
    }
}

/* ------------------------------------------------------------------ term table */

typedef struct term {
    char *s; /* owned, NUL-terminated */
    size_t len;
    uint64_t hash;
    size_t count;    /* occurrences over all documents */
    size_t df;       /* documents containing it */
    size_t last_doc; /* last document counted in df, +1 */
    size_t index;    /* vocabulary index (vectorizer table) */
} term;

typedef struct table {
    term *v;     /* owned, open addressing, cap slots; s == NULL = empty */
    size_t cap;  /* power of two */
    size_t n;    /* used */
    bool failed; /* an allocation failed */
} table;

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void table_fini(table *t)
{
    for (size_t i = 0; i < t->cap && t->v != NULL; i++)
        mt_free(t->v[i].s);
    mt_free(t->v);
    memset(t, 0, sizeof(*t));
}

static term *table_find(const table *t, const char *s, size_t n, uint64_t h)
{
    if (t->cap == 0)
        return NULL;
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        term *e = &t->v[i];
        if (e->s == NULL)
            return e;
        if (e->hash == h && e->len == n && memcmp(e->s, s, n) == 0)
            return e;
    }
}

static int table_grow(table *t)
{
    size_t nc = t->cap ? t->cap * 2 : 1024;
    term *nv = mt_calloc(nc, sizeof(*nv));
    table old = *t;

    if (nv == NULL)
        return -1;
    t->v = nv;
    t->cap = nc;
    for (size_t i = 0; i < old.cap; i++)
        if (old.v[i].s != NULL)
            *table_find(t, old.v[i].s, old.v[i].len, old.v[i].hash) = old.v[i];
    mt_free(old.v);
    return 0;
}

/* Find or insert a term; NULL on allocation failure. */
static term *table_add(table *t, const char *s, size_t n)
{
    uint64_t h = hash_bytes(s, n);
    term *e;

    if ((t->n + 1) * 2 > t->cap && table_grow(t) != 0)
        return NULL;
    e = table_find(t, s, n, h);
    if (e->s == NULL) {
        e->s = mt_malloc(n + 1);
        if (e->s == NULL)
            return NULL;
        memcpy(e->s, s, n);
        e->s[n] = '\0';
        e->len = n;
        e->hash = h;
        t->n++;
    }
    return e;
}

/* ------------------------------------------------------------------ vectorizer */

struct mt_data_tfidf {
    size_t max_tokens;
    size_t num_docs;
    size_t dim;   /* 1 + terms */
    char **terms; /* owned; terms[0] = NULL (OOV) */
    float *idf;   /* owned; dim weights, idf[0] = OOV */
    table index;  /* term -> index */
};

void mt_data_tfidf_free(mt_data_tfidf *v)
{
    if (v == NULL)
        return;
    table_fini(&v->index); /* owns the strings that terms[] point to */
    mt_free(v->terms);
    mt_free(v->idf);
    mt_free(v);
}

size_t mt_data_tfidf_dim(const mt_data_tfidf *v)
{
    return v->dim;
}

size_t mt_data_tfidf_index(const mt_data_tfidf *v, const char *s, size_t n)
{
    const term *e = table_find(&v->index, s, n, hash_bytes(s, n));
    return e == NULL || e->s == NULL ? 0 : e->index;
}

const char *mt_data_tfidf_term(const mt_data_tfidf *v, size_t i)
{
    return i == 0 || i >= v->dim ? NULL : v->terms[i];
}

float mt_data_tfidf_idf(const mt_data_tfidf *v, size_t i)
{
    return i < v->dim ? v->idf[i] : 0.0f;
}

/* An empty vectorizer with room for `terms` terms. */
static mt_data_tfidf *tfidf_alloc(size_t max_tokens, size_t num_docs, size_t terms)
{
    mt_data_tfidf *v = mt_calloc(1, sizeof(*v));
    if (v == NULL)
        return NULL;
    v->max_tokens = max_tokens;
    v->num_docs = num_docs;
    v->dim = 1 + terms;
    v->terms = mt_calloc(v->dim, sizeof(*v->terms));
    v->idf = mt_calloc(v->dim, sizeof(*v->idf));
    if (v->terms == NULL || v->idf == NULL) {
        mt_data_tfidf_free(v);
        return NULL;
    }
    return v;
}

/* Register term s as index i. -1 on allocation failure or duplicate. */
static int tfidf_set_term(mt_data_tfidf *v, size_t i, const char *s, size_t n)
{
    size_t before = v->index.n;
    term *e = table_add(&v->index, s, n);
    if (e == NULL || v->index.n == before)
        return -1;
    e->index = i;
    v->terms[i] = e->s;
    return 0;
}

typedef struct fit_ctx {
    table *t;
    size_t doc; /* current document + 1 */
} fit_ctx;

static void fit_token(const char *tok, size_t len, void *p)
{
    fit_ctx *c = p;
    term *e;
    if (c->t->failed)
        return;
    e = table_add(c->t, tok, len);
    if (e == NULL) {
        c->t->failed = true;
        return;
    }
    e->count++;
    if (e->last_doc != c->doc) {
        e->last_doc = c->doc;
        e->df++;
    }
}

static int cmp_terms(const void *a, const void *b)
{
    const term *x = *(const term *const *)a, *y = *(const term *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    c = memcmp(x->s, y->s, n);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

mt_code mt_data_tfidf_fit(const char *const *docs, const size_t *lens, size_t n, size_t max_tokens,
                          mt_data_tfidf **out, mt_err *err)
{
    table t;
    fit_ctx c = {&t, 0};
    term **sorted = NULL;
    char *scratch = NULL;
    size_t maxlen = 1, k = 0, terms;
    mt_data_tfidf *v = NULL;
    double sum = 0;

    *out = NULL;
    memset(&t, 0, sizeof(t));
    if (max_tokens < 2)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tf-idf: max_tokens %zu < 2", max_tokens);
    if (n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tf-idf: no documents to fit on");
    for (size_t i = 0; i < n; i++)
        maxlen = lens[i] > maxlen ? lens[i] : maxlen;
    scratch = mt_malloc(maxlen);
    if (scratch == NULL)
        goto oom;
    for (size_t i = 0; i < n && !t.failed; i++) {
        c.doc = i + 1;
        mt_data_tokenize(docs[i], lens[i], scratch, fit_token, &c);
    }
    if (t.failed)
        goto oom;
    sorted = mt_malloc((t.n + 1) * sizeof(*sorted));
    if (sorted == NULL)
        goto oom;
    for (size_t i = 0; i < t.cap; i++)
        if (t.v[i].s != NULL)
            sorted[k++] = &t.v[i];
    qsort(sorted, k, sizeof(*sorted), cmp_terms);
    terms = k < max_tokens - 1 ? k : max_tokens - 1;
    v = tfidf_alloc(max_tokens, n, terms);
    if (v == NULL)
        goto oom;
    for (size_t i = 0; i < terms; i++) {
        if (tfidf_set_term(v, i + 1, sorted[i]->s, sorted[i]->len) != 0)
            goto oom;
        v->idf[i + 1] = (float)log(1.0 + (double)n / (1.0 + (double)sorted[i]->df));
        sum += v->idf[i + 1];
    }
    v->idf[0] = terms > 0 ? (float)(sum / (double)terms) : 0.0f;
    mt_free(sorted);
    mt_free(scratch);
    table_fini(&t);
    *out = v;
    return MT_OK;
oom:
    mt_data_tfidf_free(v);
    mt_free(sorted);
    mt_free(scratch);
    table_fini(&t);
    return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tf-idf fit: out of memory");
}

typedef struct xf_ctx {
    const mt_data_tfidf *v;
    float *out;
} xf_ctx;

static void xf_token(const char *tok, size_t len, void *p)
{
    xf_ctx *c = p;
    c->out[mt_data_tfidf_index(c->v, tok, len)] += 1.0f;
}

/* Vectorize with a caller scratch of len bytes. */
static void transform_with(const mt_data_tfidf *v, const char *text, size_t len, float *out,
                           char *scratch)
{
    xf_ctx c = {v, out};
    memset(out, 0, v->dim * sizeof(float));
    mt_data_tokenize(text, len, scratch, xf_token, &c);
    for (size_t j = 0; j < v->dim; j++)
        out[j] *= v->idf[j];
}

mt_code mt_data_tfidf_transform(const mt_data_tfidf *v, const char *text, size_t len, float *out,
                                mt_err *err)
{
    char small[512];
    char *scratch = len <= sizeof(small) ? small : mt_malloc(len);

    if (scratch == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tf-idf: out of memory for a %zu-byte text",
                          len);
    transform_with(v, text, len, out, scratch);
    if (scratch != small)
        mt_free(scratch);
    return MT_OK;
}

/* ------------------------------------------------------------------ serialisation */

#define TFIDF_MAGIC "meshtrain-tfidf 1\n"

mt_code mt_data_tfidf_save(const mt_data_tfidf *v, char **buf, size_t *len, mt_err *err)
{
    size_t cap = 128 + 32, used = 0;
    char *b;

    *buf = NULL;
    *len = 0;
    for (size_t i = 1; i < v->dim; i++)
        cap += strlen(v->terms[i]) + 20;
    b = mt_malloc(cap);
    if (b == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tf-idf save: out of memory");
    used += (size_t)snprintf(b + used, cap - used,
                             TFIDF_MAGIC "max_tokens %zu\ndocs %zu\nterms %zu\noov %.9g\n",
                             v->max_tokens, v->num_docs, v->dim - 1, (double)v->idf[0]);
    for (size_t i = 1; i < v->dim; i++)
        used +=
            (size_t)snprintf(b + used, cap - used, "%.9g\t%s\n", (double)v->idf[i], v->terms[i]);
    *buf = b;
    *len = used;
    return MT_OK;
}

/* Read one '\n'-terminated line from buf[*pos..len) into [*s, *s + *n). */
static int next_line(const char *buf, size_t len, size_t *pos, const char **s, size_t *n)
{
    const char *nl;
    if (*pos >= len)
        return -1;
    nl = memchr(buf + *pos, '\n', len - *pos);
    if (nl == NULL)
        return -1;
    *s = buf + *pos;
    *n = (size_t)(nl - *s);
    *pos += *n + 1;
    return 0;
}

/* Parse "<key> <number>" with a bounded copy. */
static int line_number(const char *s, size_t n, const char *key, double *out)
{
    char tmp[96];
    char *end;
    size_t kl = strlen(key);
    if (n >= sizeof(tmp) || n <= kl + 1 || memcmp(s, key, kl) != 0 || s[kl] != ' ')
        return -1;
    memcpy(tmp, s + kl + 1, n - kl - 1);
    tmp[n - kl - 1] = '\0';
    *out = strtod(tmp, &end);
    return *end == '\0' && end != tmp && isfinite(*out) && *out >= 0 ? 0 : -1;
}

mt_code mt_data_tfidf_load(const char *buf, size_t len, mt_data_tfidf **out, mt_err *err)
{
    size_t pos = 0, n, ml = strlen(TFIDF_MAGIC);
    const char *s;
    double mt, docs, terms, oov;
    mt_data_tfidf *v;

    *out = NULL;
    if (len < ml || memcmp(buf, TFIDF_MAGIC, ml) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tf-idf load: not a meshtrain-tfidf 1 file");
    pos = ml;
    if (next_line(buf, len, &pos, &s, &n) || line_number(s, n, "max_tokens", &mt) ||
        next_line(buf, len, &pos, &s, &n) || line_number(s, n, "docs", &docs) ||
        next_line(buf, len, &pos, &s, &n) || line_number(s, n, "terms", &terms) ||
        next_line(buf, len, &pos, &s, &n) || line_number(s, n, "oov", &oov) || mt < 2 ||
        mt > (1u << 22) || terms > mt - 1 || terms != floor(terms) || mt != floor(mt) ||
        docs > 1e15 || terms > (double)(len - pos))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tf-idf load: bad header");
    v = tfidf_alloc((size_t)mt, (size_t)docs, (size_t)terms);
    if (v == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tf-idf load: out of memory");
    v->idf[0] = (float)oov;
    for (size_t i = 1; i < v->dim; i++) {
        char tmp[64];
        const char *tab;
        char *end;
        size_t tl;
        if (next_line(buf, len, &pos, &s, &n) || (tab = memchr(s, '\t', n)) == NULL ||
            (size_t)(tab - s) >= sizeof(tmp))
            goto bad;
        memcpy(tmp, s, (size_t)(tab - s));
        tmp[tab - s] = '\0';
        v->idf[i] = strtof(tmp, &end);
        if (*end != '\0' || end == tmp || !isfinite(v->idf[i]) || v->idf[i] < 0)
            goto bad;
        tl = n - (size_t)(tab - s) - 1;
        for (size_t j = 0; j < tl; j++)
            if (!is_tok((unsigned char)tab[1 + j]) || (tab[1 + j] >= 'A' && tab[1 + j] <= 'Z'))
                goto bad;
        if (tl == 0)
            goto bad;
        if (tfidf_set_term(v, i, tab + 1, tl) != 0) {
            mt_data_tfidf_free(v);
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "tf-idf load: term %zu duplicated or out of memory", i);
        }
        continue;
    bad:
        mt_data_tfidf_free(v);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tf-idf load: bad term line %zu", i + 5);
    }
    if (pos != len) {
        mt_data_tfidf_free(v);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tf-idf load: trailing bytes");
    }
    *out = v;
    return MT_OK;
}

/* ------------------------------------------------------------------ documents */

void mt_data__docs_fini(mt_data__docs *d)
{
    for (size_t i = 0; i < d->n; i++)
        mt_free(d->v[i].text);
    mt_free(d->v);
    memset(d, 0, sizeof(*d));
}

/* Append a document; takes `text` (freed on failure). */
static mt_code docs_push(mt_data__docs *d, int32_t label, char *text, size_t len, mt_err *err)
{
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 64;
        mt_data__doc *nv = mt_realloc(d->v, nc * sizeof(*nv));
        if (nv == NULL) {
            mt_free(text);
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "text: out of memory");
        }
        d->v = nv;
        d->cap = nc;
    }
    d->v[d->n].label = label;
    d->v[d->n].text = text;
    d->v[d->n].len = len;
    d->n++;
    return MT_OK;
}

mt_code mt_data__text_read_tsv(FILE *fp, const char *name, int num_classes, mt_data__docs *docs,
                               mt_err *err)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t r;
    mt_code rc = MT_OK;

    while ((r = getline(&line, &cap, fp)) >= 0) {
        size_t len = (size_t)r;
        char *tab, *end, *text;
        long lab;
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        tab = memchr(line, '\t', len);
        if (tab == NULL) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%zu: expected label<TAB>text", name,
                            lineno);
            break;
        }
        *tab = '\0';
        errno = 0;
        lab = strtol(line, &end, 10);
        if (end == line || *end != '\0' || errno != 0 || lab < 0 || lab > INT32_MAX ||
            (num_classes > 0 && lab >= num_classes)) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "%s:%zu: label '%.20s' is not an integer in [0, %d)", name, lineno,
                            line, num_classes > 0 ? num_classes : INT32_MAX);
            break;
        }
        text = mt_malloc(len - (size_t)(tab - line));
        if (text == NULL) {
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
            break;
        }
        memcpy(text, tab + 1, len - (size_t)(tab - line));
        rc = docs_push(docs, (int32_t)lab, text, len - (size_t)(tab - line) - 1, err);
        if (rc != MT_OK)
            break;
    }
    if (rc == MT_OK && ferror(fp))
        rc = mt_err_set(err, MT_DATA_LOSS, "read %s: I/O error", name);
    free(line);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of `dir` that are directories (want_dir) or regular files. */
static mt_code list_dir(const char *dir, bool want_dir, char ***names, size_t *n, mt_err *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t cap = 0;
    mt_code rc = MT_OK;

    *names = NULL;
    *n = 0;
    if (d == NULL)
        return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_PERMISSION_DENIED, "open %s: %s",
                          dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nv = mt_realloc(*names, nc * sizeof(*nv));
            if (nv == NULL) {
                rc = MT_RESOURCE_EXHAUSTED;
                break;
            }
            *names = nv;
            cap = nc;
        }
        (*names)[*n] = mt_strdup(e->d_name);
        if ((*names)[*n] == NULL) {
            rc = MT_RESOURCE_EXHAUSTED;
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (rc != MT_OK)
        return mt_err_set(err, rc, "list %s: out of memory", dir);
    if (*n > 0)
        qsort(*names, *n, sizeof(**names), cmp_str);
    return MT_OK;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mt_free(names[i]);
    mt_free(names);
}

/* Read a whole regular file; *text owned. */
static mt_code slurp(const char *path, char **text, size_t *len, mt_err *err)
{
    FILE *fp;
    long sz;
    mt_code rc = mt_data__fopen(path, &fp, err);

    *text = NULL;
    if (rc != MT_OK)
        return rc;
    if (fseek(fp, 0, SEEK_END) != 0 || (sz = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        return mt_err_set(err, MT_DATA_LOSS, "read %s: cannot seek", path);
    }
    *text = mt_malloc((size_t)sz + 1);
    if (*text == NULL) {
        fclose(fp);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "read %s: out of memory", path);
    }
    if (fread(*text, 1, (size_t)sz, fp) != (size_t)sz) {
        fclose(fp);
        mt_free(*text);
        *text = NULL;
        return mt_err_set(err, MT_DATA_LOSS, "read %s: short read", path);
    }
    (*text)[sz] = '\0';
    *len = (size_t)sz;
    fclose(fp);
    return MT_OK;
}

/* Directory per label: dir/<label>/<doc>. Labels are the sorted sub-directory indices. */
static mt_code read_label_dirs(const mt_data_spec *spec, const char *dir, mt_data__docs *docs,
                               bool count_only, size_t *count, mt_err *err)
{
    char **labels = NULL;
    size_t nl = 0;
    mt_code rc = list_dir(dir, true, &labels, &nl, err);

    *count = 0;
    if (rc == MT_OK && nl == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no label sub-directories", dir);
    if (rc == MT_OK && spec->num_classes > 0 && nl > (size_t)spec->num_classes)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: %zu label directories > num_classes %d", dir,
                        nl, spec->num_classes);
    for (size_t l = 0; l < nl && rc == MT_OK; l++) {
        char sub[4096];
        char **files = NULL;
        size_t nf = 0;
        snprintf(sub, sizeof(sub), "%s/%s", dir, labels[l]);
        rc = list_dir(sub, false, &files, &nf, err);
        for (size_t i = 0; i < nf && rc == MT_OK && !count_only; i++) {
            char path[4096 + 256];
            char *text;
            size_t len = 0;
            snprintf(path, sizeof(path), "%s/%s", sub, files[i]);
            rc = slurp(path, &text, &len, err);
            if (rc == MT_OK)
                rc = docs_push(docs, (int32_t)l, text, len, err);
        }
        *count += nf;
        free_names(files, nf);
    }
    free_names(labels, nl);
    return rc;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

mt_code mt_data__text_read_file(const mt_data_spec *spec, const mt_data_file *f,
                                mt_data__docs *docs, mt_err *err)
{
    FILE *fp;
    size_t n;
    mt_code rc;

    if (is_dir(f->path))
        return read_label_dirs(spec, f->path, docs, false, &n, err);
    rc = mt_data__fopen(f->path, &fp, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_data__text_read_tsv(fp, f->path, spec->num_classes, docs, err);
    fclose(fp);
    return rc;
}

static mt_code text_count(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                          size_t *n, mt_err *err)
{
    mt_data__docs docs = {0, 0, NULL};
    mt_code rc;

    (void)fit;
    *n = 0;
    if (is_dir(f->path)) {
        rc = read_label_dirs(spec, f->path, &docs, true, n, err);
    } else {
        rc = mt_data__count_records(f->path, false, n, err);
    }
    if (rc == MT_OK && *n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no documents", f->path);
    return rc;
}

/* Append row `row` (dim floats) to c's nonzeros; 0 or RESOURCE_EXHAUSTED-worthy -1. */
static int csr_push_row(mt_data__csr *c, size_t *cap, const float *row, size_t i)
{
    for (size_t j = 0; j < c->dim; j++) {
        if (row[j] == 0.0f)
            continue;
        if (c->nnz == *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            uint32_t *ni = mt_realloc(c->idx, nc * sizeof(uint32_t));
            float *nv;
            if (ni == NULL)
                return -1;
            c->idx = ni;
            nv = mt_realloc(c->val, nc * sizeof(float));
            if (nv == NULL)
                return -1;
            c->val = nv;
            *cap = nc;
        }
        c->idx[c->nnz] = (uint32_t)j;
        c->val[c->nnz++] = row[j];
    }
    c->ptr[i + 1] = c->nnz;
    return 0;
}

/*
 * Decode f with the vectorizer: into the dense block `dense` or, when it is NULL, into the
 * compressed sparse rows `csr` (each document is vectorized into one reused row and its nonzeros
 * kept, so both forms hold the same floats bit for bit).
 */
static mt_code text_decode(const mt_data_spec *spec, const mt_data_file *f, const mt_data_tfidf *v,
                           mt_data_block *dense, mt_data__csr *csr, mt_err *err)
{
    mt_data__docs docs = {0, 0, NULL};
    char *scratch = NULL;
    float *row = NULL;
    size_t maxlen = 1, cap = 0;
    int32_t *y;
    mt_code rc;

    if (dense != NULL)
        memset(dense, 0, sizeof(*dense));
    else
        memset(csr, 0, sizeof(*csr));
    if (v == NULL)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "%s: text datasets need a fitted TF-IDF vectorizer", f->path);
    rc = mt_data__text_read_file(spec, f, &docs, err);
    if (rc == MT_OK && docs.n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: no documents", f->path);
    if (rc != MT_OK)
        goto out;
    for (size_t i = 0; i < docs.n; i++)
        maxlen = docs.v[i].len > maxlen ? docs.v[i].len : maxlen;
    scratch = mt_malloc(maxlen);
    y = mt_malloc(docs.n * sizeof(int32_t));
    if (dense != NULL) {
        dense->n = docs.n;
        dense->dim = v->dim;
        dense->y_dim = 1;
        dense->x = mt_malloc(docs.n * v->dim * sizeof(float));
        dense->y = y;
    } else {
        csr->n = docs.n;
        csr->dim = v->dim;
        csr->ptr = mt_calloc(docs.n + 1, sizeof(size_t));
        csr->y = y;
        row = mt_malloc(v->dim * sizeof(float));
    }
    if (scratch == NULL || y == NULL ||
        (dense != NULL ? dense->x == NULL : (csr->ptr == NULL || row == NULL))) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", f->path);
        goto out;
    }
    for (size_t i = 0; i < docs.n; i++) {
        y[i] = docs.v[i].label;
        if (dense != NULL) {
            transform_with(v, docs.v[i].text, docs.v[i].len, dense->x + i * v->dim, scratch);
            continue;
        }
        transform_with(v, docs.v[i].text, docs.v[i].len, row, scratch);
        if (csr_push_row(csr, &cap, row, i) != 0) {
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", f->path);
            goto out;
        }
    }
out:
    if (rc != MT_OK) {
        if (dense != NULL)
            mt_data_block_fini(dense);
        else
            mt_data__csr_fini(csr);
    }
    mt_free(row);
    mt_free(scratch);
    mt_data__docs_fini(&docs);
    return rc;
}

static mt_code text_load(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                         mt_data_block *out, mt_err *err)
{
    return text_decode(spec, f, fit->vec, out, NULL, err);
}

static mt_code text_load_csr(const mt_data_spec *spec, const mt_data_file *f,
                             const mt_data__fit *fit, mt_data__csr *out, mt_err *err)
{
    return text_decode(spec, f, fit->vec, NULL, out, err);
}

const mt_data__source mt_data__text_source = {"text", text_count, text_load, text_load_csr};

mt_code mt_data_tfidf_fit_spec(const mt_data_spec *spec, mt_data_tfidf **out, mt_err *err)
{
    mt_data__docs docs = {0, 0, NULL};
    const char **texts = NULL;
    size_t *lens = NULL;
    mt_code rc = MT_OK;

    *out = NULL;
    if (spec->format != MT_DATA_FORMAT_TEXT)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s.format: tf-idf needs a text dataset",
                          mt_data__spec_path(spec));
    for (size_t i = 0; i < spec->train.n && rc == MT_OK; i++)
        rc = mt_data__text_read_file(spec, &spec->train.files[i], &docs, err);
    if (rc != MT_OK)
        goto out;
    texts = mt_malloc((docs.n + 1) * sizeof(*texts));
    lens = mt_malloc((docs.n + 1) * sizeof(*lens));
    if (texts == NULL || lens == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tf-idf fit: out of memory");
        goto out;
    }
    for (size_t i = 0; i < docs.n; i++) {
        texts[i] = docs.v[i].text;
        lens[i] = docs.v[i].len;
    }
    rc = mt_data_tfidf_fit(texts, lens, docs.n, spec->max_tokens, out, err);
out:
    mt_free(texts);
    mt_free(lens);
    mt_data__docs_fini(&docs);
    return rc;
}
