/* SPDX-License-Identifier: MIT */
/*
 * mt_text.h — tokenizers for language models (character-level and byte-level byte-pair
 * encoding), their vocabulary file, and next-token sampling for generation.
 *
 * Role: the "tokens" dataset format of core/data fits a tokenizer on the TRAINING split and cuts
 * the token ids into next-token examples; `meshtrain generate` (client/cmd_generate.c) encodes a
 * prompt, asks the model for logits, samples with mt_text_sample and decodes. Calls core/alloc,
 * core/rng (the sampler's counter-based draws) and zlib (crc32 of the vocabulary file); no I/O
 * except mt_text_tokenizer_read_file.
 *
 * Tokenizers (docs/transformers.md has the examples):
 *   char  A character is one well-formed UTF-8 sequence, or one byte where the bytes are not
 *         well-formed UTF-8. Id 0 is the unknown character (decodes to U+FFFD); ids 1..K are the
 *         K most frequent characters of the fitting text (ties: byte order), numbered in byte
 *         order (= code point order), K = min(distinct, vocab_size - 1). vocab_size 0 means
 *         "every distinct character" (vocab_size = distinct + 1).
 *   bpe   Byte-level: ids 0..255 are the bytes, id 256 + i is merge i. Text is first cut into
 *         chunks (mt_text_chunk_len) and merges never cross a chunk. Fitting repeats: count every
 *         adjacent pair of ids inside the chunks (weighted by how often the chunk occurs), merge
 *         the most frequent pair — TIES GO TO THE SMALLEST (left id, right id) — into a new id,
 *         replacing occurrences left to right; until vocab_size - 256 merges or no pair is left.
 *         Encoding applies, inside each chunk, the pair of lowest merge index first (GPT-2's
 *         rule). Any byte string encodes, so decode(encode(s)) == s always.
 *   Ids that the fit could not fill (a text with fewer characters or pairs than vocab_size asks
 *   for) are unused: encoding never yields them and they decode to nothing.
 *
 * Vocabulary file ("meshtrain-vocab 1", text, docs/input-pipeline.md): magic line, "type",
 * "vocab_size", "entries K", K entry lines (char: the character's bytes in lower-case hex;
 * bpe: "LEFT RIGHT" decimal ids), then "crc32 XXXXXXXX" over every byte before that line. The
 * loader checks every count, range, order and the checksum, and names the file and line.
 *
 * Threading: a tokenizer is immutable after fit/load and may be shared between threads.
 * Tests: tests/unit/test_text.c; fuzz: tests/fuzz/fuzz_vocab.c.
 */
#ifndef MT_TEXT_H
#define MT_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

#define MT_TEXT_MAX_VOCAB (1u << 20) /* ids stay exact in float32 (below 2^24) */

typedef enum mt_text_tokenizer_type {
    MT_TEXT_TOKENIZER_CHAR = 0,
    MT_TEXT_TOKENIZER_BPE = 1,
} mt_text_tokenizer_type;

/* "char" | "bpe" (static strings) and back. Parse: MT_OK or INVALID_ARGUMENT. */
const char *mt_text_tokenizer_type_name(mt_text_tokenizer_type t);
mt_code mt_text_tokenizer_type_parse(const char *s, mt_text_tokenizer_type *out);

typedef struct mt_text_tokenizer mt_text_tokenizer;

/*
 * Fit a tokenizer of `type` with `vocab_size` ids (char: 0 or 2..MT_TEXT_MAX_VOCAB; bpe:
 * 256..MT_TEXT_MAX_VOCAB) on the n texts[i] of lens[i] bytes (borrowed; any bytes). The result
 * depends only on the concatenated chunk counts, never on thread timing. On MT_OK *out is owned
 * (mt_text_tokenizer_free); on failure *out = NULL. Codes: INVALID_ARGUMENT (vocab_size out of
 * range; a char fit on no text), RESOURCE_EXHAUSTED. Any thread; CPU bound (a 5 MB text with
 * 256 merges takes about a second).
 */
mt_code mt_text_tokenizer_fit(mt_text_tokenizer_type type, size_t vocab_size,
                              const char *const *texts, const size_t *lens, size_t n,
                              mt_text_tokenizer **out, mt_err *err);

/* Release a tokenizer; NULL is a no-op. */
void mt_text_tokenizer_free(mt_text_tokenizer *t);

mt_text_tokenizer_type mt_text_tokenizer_kind(const mt_text_tokenizer *t);
/* Size of the id space (what the model's embedding and LM head are sized by). */
size_t mt_text_tokenizer_vocab_size(const mt_text_tokenizer *t);
/* Ids the fit filled: char 1 + K, bpe 256 + merges; ids at or above are unused. */
size_t mt_text_tokenizer_used(const mt_text_tokenizer *t);
/* The bytes id decodes to (borrowed; *len 0 for unused ids), NULL when id is out of range. */
const unsigned char *mt_text_tokenizer_token(const mt_text_tokenizer *t, uint32_t id, size_t *len);

/*
 * Encode text[0..len) (borrowed) into *ids (owned, mt_free; NULL when *n == 0). Codes:
 * RESOURCE_EXHAUSTED. Any thread.
 */
mt_code mt_text_tokenizer_encode(const mt_text_tokenizer *t, const char *text, size_t len,
                                 uint32_t **ids, size_t *n, mt_err *err);

/*
 * Decode ids[0..n) into *text (owned, mt_free, NUL-terminated; *len excludes the NUL). Codes:
 * INVALID_ARGUMENT ("token id 600 is outside the vocabulary of 512"), RESOURCE_EXHAUSTED.
 */
mt_code mt_text_tokenizer_decode(const mt_text_tokenizer *t, const uint32_t *ids, size_t n,
                                 char **text, size_t *len, mt_err *err);

/* Serialise to the vocabulary file format; *buf is owned (mt_free), NUL-terminated. */
mt_code mt_text_tokenizer_save(const mt_text_tokenizer *t, char **buf, size_t *len, mt_err *err);

/*
 * Parse a vocabulary file image buf[0..len) (borrowed) named `name` (for messages). On MT_OK *out
 * is owned. Codes: INVALID_ARGUMENT ("vocab F: line 4: entries 300 but vocab_size 280 allows at
 * most 279"), DATA_LOSS ("vocab F: crc32 mismatch ..."), RESOURCE_EXHAUSTED.
 */
mt_code mt_text_tokenizer_load(const char *name, const char *buf, size_t len,
                               mt_text_tokenizer **out, mt_err *err);

/* Read and parse the vocabulary file at path. Codes: as load, NOT_FOUND, PERMISSION_DENIED. */
mt_code mt_text_tokenizer_read_file(const char *path, mt_text_tokenizer **out, mt_err *err);

/* Write the vocabulary file to path (a temporary name renamed into place). Codes: I/O codes
 * with strerror (NOT_FOUND, PERMISSION_DENIED, INTERNAL), RESOURCE_EXHAUSTED. */
mt_code mt_text_tokenizer_write_file(const mt_text_tokenizer *t, const char *path, mt_err *err);

/* Whether a and b give the same ids for every text (same type, vocab_size and entries). */
bool mt_text_tokenizer_equal(const mt_text_tokenizer *a, const mt_text_tokenizer *b);

/*
 * The byte-pair pre-tokenizer: length (>= 1) of the chunk starting at text[0] of the n > 0
 * bytes. Classes: word bytes (ASCII letters and digits, bytes >= 0x80), space bytes (space, \t,
 * \n, \v, \f, \r), other bytes. A chunk is one space followed by a run of word bytes or of other
 * bytes (" the", " --"), or a run of one class; a run of spaces leaves its last space to the
 * next chunk when a non-space follows ("a  b" → "a", " ", " b"). Pure.
 */
size_t mt_text_chunk_len(const unsigned char *text, size_t n);

/* ------------------------------------------------------------------ sampling */

typedef struct mt_text_sample_opts {
    float temperature; /* 0: greedy (argmax, ties to the lowest id); > 0 divides the logits */
    size_t top_k;      /* 0: every id; else only the k largest logits (ties to lower ids) */
    uint64_t seed;     /* the draws' key */
} mt_text_sample_opts;

#define MT_TEXT_SAMPLE_OPTS_DEFAULTS                                                               \
    {                                                                                              \
        1.0f, 0, 0                                                                                 \
    }

/*
 * Draw the next token from logits[0..v) (borrowed): among the kept ids (top_k), probability
 * p_i = exp((l_i - max) / temperature) / sum; then u = mt_rng_uniform(seed,
 * mt_rng_name_id("generate"), index) and the first kept id, in id order, whose cumulative
 * probability exceeds u·sum. `index` is the draw number (the position of the new token), so a
 * seed gives the same tokens for the same logits. Codes: INVALID_ARGUMENT (v == 0, a NaN
 * logit, temperature < 0 or not finite), RESOURCE_EXHAUSTED. Any thread.
 */
mt_code mt_text_sample(const float *logits, size_t v, const mt_text_sample_opts *o, uint64_t index,
                       uint32_t *out, mt_err *err);

/*
 * The model as the generation loop sees it: write into *logits (borrowed from ctx until the
 * next call) the v logits of the token that follows ids[0..n) (1 <= n <= block_size).
 */
typedef mt_code (*mt_text_logits_fn)(void *ctx, const uint32_t *ids, size_t n, const float **logits,
                                     mt_err *err);

/*
 * Autoregressive generation: starting from prompt[0..n_prompt) (n_prompt >= 1), n_new times
 * ask fn for the logits after the last block_size ids, draw one with mt_text_sample (draw index =
 * the new token's position in the sequence) and append. *out (owned, mt_free) gets the whole
 * sequence, prompt included (*n_out = n_prompt + n_new). A draw outside [0, v) cannot happen.
 * Codes: INVALID_ARGUMENT (empty prompt, block_size 0), fn's codes, RESOURCE_EXHAUSTED.
 */
mt_code mt_text_generate(const uint32_t *prompt, size_t n_prompt, size_t n_new, size_t block_size,
                         size_t v, const mt_text_sample_opts *o, mt_text_logits_fn fn, void *ctx,
                         uint32_t **out, size_t *n_out, mt_err *err);

/* ------------------------------------------------------------------ sequences */

/*
 * Cut a token stream ids[0..n) into next-token examples of block_size tokens: example e has
 * inputs ids[e·T .. e·T + T) and targets ids[e·T + 1 .. e·T + T + 1) (T = block_size); the
 * examples do not overlap and the tokens after the last whole example are dropped, so there are
 * (n - 1) / T examples (mt_text_sequence_count). x (count, T) gets the inputs as float32 (ids
 * below 2^24 are exact), y (count, T) the targets as int32; both caller memory, either may be
 * NULL. Pure; any thread.
 */
size_t mt_text_sequence_count(size_t n, size_t block_size);
void mt_text_sequence_cut(const uint32_t *ids, size_t n, size_t block_size, float *x, int32_t *y);

#endif
