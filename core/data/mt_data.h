/* SPDX-License-Identifier: MIT */
/*
 * mt_data.h — datasets and the distributed input pipeline (tf.data + tf.distribute semantics).
 *
 * Role: turn the `dataset` section of a job spec into, for each worker (one input pipeline per
 * worker), a stream of steps; each step carries one batch per local replica plus the number of
 * examples in the whole global batch. Called by the training engine, the worker task runner and
 * `meshtrain plan`; calls cJSON, zlib (through core/data/mt_idx.h), pthreads, glob(3).
 *
 * Layers, bottom up:
 *   spec      mt_data_spec_parse(): the `dataset` JSON section, errors carry the JSON path.
 *   sources   CSV, labelled text (+ TF-IDF vectorizer), IDX, NumPy .npy/.npz, image folders
 *             (PNG/JPEG), plain text cut into next-token sequences ("tokens", + a core/text
 *             tokenizer fitted on the training files): each input file decodes into an
 *             mt_data_block (n examples × dim float32 features, int32 labels or float targets).
 *   dataset   mt_data_dataset: the files of one split with their example counts.
 *   plan      mt_data_plan: pure arithmetic from (file sizes, shard policy, batching, pipelines,
 *             replicas, global batch, drop_remainder) to "which positions of my stream does
 *             replica l get at step s", the steps per epoch (identical on every pipeline) and
 *             the example count of every global batch. No I/O: the property tests run on it.
 *   pipeline  mt_data_pipeline: loads the files a pipeline needs, shuffles with a buffer
 *             (deterministic for (seed, epoch)), assembles steps on a prefetch thread.
 *
 * Semantics (docs/input-pipeline.md has the examples):
 *   * Elements are float32 feature vectors of fixed length `dim` (images are H×W×C, row-major
 *     NHWC) with y_dim int32 class labels (one, or one per output row: a label per pixel or per
 *     token), or with t_dim float32 targets (regression).
 *   * Shard policies as tf.data AutoShardPolicy: FILE splits the files among pipelines round
 *     robin (file f → pipeline f % N); DATA makes every pipeline read everything and keep every
 *     N-th element (here: every N-th per-replica batch, as tf.distribute does after rebatching);
 *     OFF gives every pipeline all data; AUTO = FILE when files >= pipelines, else DATA (logged).
 *   * Rebatching (tf.distribute's rule): a batch of n examples over R replicas is cut into
 *     pieces of ceil(n / R); replica r gets [r·c, min((r+1)·c, n)) — possibly empty.
 *   * All pipelines agree on the number of steps per epoch (the longest pipeline wins, as
 *     get_next_as_optional does); replicas that ran out get empty batches (zero gradient).
 *   * Every step carries global_count, the examples in the whole global batch over all
 *     replicas: the training loss is the per-example sum divided by it.
 *
 * Invariants: a plan is identical on every pipeline given the same inputs; a pipeline never
 * yields a partially decoded record (any parse error fails the open with file:line).
 * Threading: spec, plan and vectorizer objects are immutable after construction and may be
 * shared between threads. A dataset or pipeline is used by one thread at a time (the pipeline
 * owns one internal prefetch thread).
 * Tests: tests/unit/test_data_shard.c (plan, rebatch, property), test_data_csv.c,
 * test_data_text.c (tokenizer, TF-IDF), test_data_pipeline.c (shuffle, prefetch, slices),
 * test_data_spec.c (spec errors), test_data_idx.c (IDX pairs), test_data_npy.c,
 * test_data_image.c, test_data_csv.c (string labels, float targets, missing values),
 * test_data_tokens.c; fuzz:
 * tests/fuzz/fuzz_csv.c, fuzz_text.c, fuzz_npy.c, fuzz_image.c.
 */
#ifndef MT_DATA_H
#define MT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "status/mt_status.h"
#include "text/mt_text.h"

/* ------------------------------------------------------------------ enums */

typedef enum mt_data_format {
    MT_DATA_FORMAT_CSV = 0,    /* numeric columns + a label column */
    MT_DATA_FORMAT_TEXT = 1,   /* label<TAB>text lines, or a directory per label; TF-IDF */
    MT_DATA_FORMAT_IDX = 2,    /* (Fashion-)MNIST image + label files */
    MT_DATA_FORMAT_NPY = 3,    /* NumPy .npy (x, y) pairs or .npz archives (stored or deflated) */
    MT_DATA_FORMAT_IMAGES = 4, /* image folders: one sub-folder per class, PNG and JPEG files */
    MT_DATA_FORMAT_TOKENS = 5, /* plain text, tokenized, cut into next-token sequences */
} mt_data_format;

/* What the label (target) of an example is. */
typedef enum mt_data_label_type {
    MT_DATA_LABEL_INT = 0,    /* an integer class id (int32 labels) */
    MT_DATA_LABEL_STRING = 1, /* a class name, mapped to its id (class_names order) */
    MT_DATA_LABEL_FLOAT = 2,  /* regression: float targets, any number per example */
} mt_data_label_type;

/* What a CSV reader does with a missing feature value (empty, NA, N/A, NaN, nan, null, ?). */
typedef enum mt_data_missing {
    MT_DATA_MISSING_REFUSE = 0, /* fail the file with FILE:LINE (default) */
    MT_DATA_MISSING_FILL = 1,   /* use fill_value */
} mt_data_missing;

/* Random flips of the image-folder augmentation (Keras RandomFlip modes). */
typedef enum mt_data_flip {
    MT_DATA_FLIP_NONE = 0,
    MT_DATA_FLIP_HORIZONTAL = 1,
    MT_DATA_FLIP_VERTICAL = 2,
    MT_DATA_FLIP_BOTH = 3, /* "horizontal_and_vertical": each axis independently */
} mt_data_flip;

/*
 * Training-time augmentation of image examples (H, W, C), applied by the pipeline when it
 * assembles a step: a random flip, then a random crop after zero padding by `crop_padding` pixels
 * on each side (the output keeps H×W). The draws of example e in epoch k are a function of
 * (seed, k, e) where e is the example's global index in the training split (files in spec order,
 * examples in file order), so the bits never depend on the mesh or the shard policy. Evaluation
 * data is never augmented.
 */
typedef struct mt_data_augment {
    mt_data_flip flip;   /* default NONE */
    size_t crop_padding; /* 0 = no random crop */
} mt_data_augment;

typedef enum mt_data_shard_policy {
    MT_DATA_SHARD_AUTO = 0,
    MT_DATA_SHARD_FILE = 1,
    MT_DATA_SHARD_DATA = 2,
    MT_DATA_SHARD_OFF = 3,
} mt_data_shard_policy;

typedef enum mt_data_batching {
    MT_DATA_BATCH_GLOBAL = 0,      /* experimental_distribute_dataset: batch globally, rebatch */
    MT_DATA_BATCH_PER_REPLICA = 1, /* distribute_datasets_from_function: shard, batch B/R */
} mt_data_batching;

typedef enum mt_data_split {
    MT_DATA_SPLIT_TRAIN = 0,
    MT_DATA_SPLIT_TEST = 1,
} mt_data_split;

/* "auto" | "file" | "data" | "off" (static strings) and back. Parse: MT_OK or INVALID_ARGUMENT. */
const char *mt_data_shard_policy_name(mt_data_shard_policy p);
mt_code mt_data_shard_policy_parse(const char *s, mt_data_shard_policy *out);

/* ------------------------------------------------------------------ spec */

/*
 * One input file. For IDX, `path` is the images file and `labels_path` the labels file; for NPY
 * a pair of .npy files (x in `path`, y in `labels_path`) or one .npz archive (`labels_path`
 * NULL); for IMAGES a root directory with one sub-folder per class.
 */
typedef struct mt_data_file {
    char *path;        /* owned */
    char *labels_path; /* owned; IDX and NPY pairs only, else NULL */
} mt_data_file;

typedef struct mt_data_file_list {
    size_t n;
    mt_data_file *files; /* owned array of n */
} mt_data_file_list;

/* A CSV column named by header name or by 0-based index. */
typedef struct mt_data_column {
    char *name; /* owned; NULL when selected by index */
    long index; /* used when name == NULL */
} mt_data_column;

/*
 * The parsed `dataset` section (every field is documented in docs/input-pipeline.md). Public so
 * other modules can read it; built only by mt_data_spec_parse() and released with
 * mt_data_spec_free(). Paths are resolved against the base directory given to the parser and
 * globs are expanded, so `train.files` lists real paths in a stable (sorted per glob) order.
 */
typedef struct mt_data_spec {
    mt_data_format format;
    mt_data_file_list train; /* "train": required */
    mt_data_file_list test;  /* "test": optional (n == 0 when absent) */
    /* CSV */
    mt_data_column label_column;   /* default: the last column */
    bool label_column_set;         /* false: last column */
    mt_data_column *target_cols;   /* owned; float labels with several columns ("label_column":
                                      [...]), else NULL (then label_column is the one target) */
    size_t n_target_cols;          /* */
    mt_data_label_type label_type; /* CSV, NPY: default INT; IMAGES: STRING (folder names) */
    char **class_names;            /* owned; "class_names" (ids in this order), NULL = derived */
    size_t n_class_names;          /* */
    mt_data_missing missing;       /* CSV features: default REFUSE */
    float fill_value;              /* MT_DATA_MISSING_FILL: the value used (default 0) */
    char *x_key, *y_key;           /* owned; NPZ member names without ".npy" ("x", "y") */
    size_t image_size[2];          /* IMAGES: H, W every image is resized to (required) */
    size_t channels;               /* IMAGES: 1 ("grayscale") or 3 ("rgb", default) */
    float mean[3], std[3];         /* IMAGES: (pixel·scale − mean[c]) / std[c]; default 0, 1 */
    mt_data_augment augment;       /* IMAGES, NPY with an image shape: training augmentation */
    mt_data_column *feature_cols;  /* owned; NULL = every column except the label */
    size_t n_feature_cols;         /* */
    bool header;                   /* first line names the columns (default true) */
    char delimiter;                /* default ',' */
    float scale;                   /* features are multiplied by it (default 1; IMAGES 1/255) */
    size_t shape[3];               /* optional H, W, C view of the features; 0 = flat */
    int num_classes;               /* labels checked in [0, num_classes); 0 = unchecked */
    size_t max_tokens;             /* TEXT: vocabulary size incl. OOV index 0 (default 1200) */
    mt_text_tokenizer_type tokenizer; /* TOKENS: "tokenizer.type" (default char) */
    size_t vocab_size;                /* TOKENS: "tokenizer.vocab_size" (char: 0 = every char) */
    size_t block_size;                /* TOKENS: tokens per example (required) */
    size_t shuffle_buffer;            /* 0 = no shuffling (default 0) */
    uint64_t seed;                    /* shuffle seed (default 0; engines pass the job seed) */
    bool seed_set;                    /* "seed" was present in the section */
    mt_data_shard_policy shard;       /* default AUTO */
    mt_data_batching batching;        /* default GLOBAL */
    bool drop_remainder;              /* default false */
    size_t prefetch;                  /* prefetch depth in steps; 0 = synchronous (default 2) */
    bool prefetch_set; /* "prefetch" was given; else the trainer chooses the depth (core/spmd:
                          0 when the job's device threads fill the host's cores and some run in
                          other processes, else 2) */
    char *json_path;   /* owned; the section's JSON path, for messages */
} mt_data_spec;

/*
 * Parse a `dataset` JSON object (borrowed). NULL means the section is absent: the Fashion-MNIST
 * IDX files of the Debian package dataset-fashion-mnist (train and test, num_classes 10). The
 * training engine's flat IDX form {"format": "idx", "train_images", "train_labels",
 * "test_images", "test_labels"} is accepted too ("format" may then be omitted). `json_path` names
 * the node in messages (NULL means "dataset"); `base_dir` resolves relative paths (NULL: the
 * current directory). Checks types and ranges, expands globs (a pattern matching nothing is
 * NOT_FOUND) and, for CSV, that every file exists and its header has the named columns
 * (`dataset.label_column: no column 'y' in data/train.csv (columns: a, b, label)`). On MT_OK *out
 * is owned by the caller (mt_data_spec_free); on failure *out = NULL. Codes: INVALID_ARGUMENT (bad
 * field, message starts with the JSON path), NOT_FOUND (missing file or empty glob),
 * PERMISSION_DENIED, RESOURCE_EXHAUSTED. Any thread; blocks on file-system reads.
 */
mt_code mt_data_spec_parse(const cJSON *dataset_node, const char *json_path, const char *base_dir,
                           mt_data_spec **out, mt_err *err);

/* Release a spec; NULL is a no-op. */
void mt_data_spec_free(mt_data_spec *spec);

/* ------------------------------------------------------------------ blocks */

/*
 * A decoded file: n examples of dim features. Owned buffers (mt_free), released by _fini. Class
 * labels are in y, y_dim per example ((n, y_dim) row-major: one per example, or one per output
 * row of a model whose output has rows, e.g. a label per pixel or per token); float (regression)
 * targets are in t with t_dim values per example, and y then holds one zero per example (t ==
 * NULL and t_dim == 0 for class labels).
 */
typedef struct mt_data_block {
    size_t n;        /* examples */
    size_t dim;      /* features per example */
    size_t shape[3]; /* H, W, C when the features are an image; all 0 when flat */
    float *x;        /* owned (n, dim) row-major */
    int32_t *y;      /* owned (n, y_dim) */
    float *t;        /* owned (n, t_dim) row-major float targets, or NULL */
    size_t t_dim;    /* float targets per example; 0 for class labels */
    size_t y_dim;    /* class labels per example; 0 is read as 1 (hand-built blocks) */
} mt_data_block;

/* Free the buffers and zero *b. Zeroed memory and NULL are no-ops. */
void mt_data_block_fini(mt_data_block *b);

/* ------------------------------------------------------------------ classes and raw inputs */

/* Class names: id i is names[i]. Owned strings, released by mt_data_classes_fini. */
typedef struct mt_data_classes {
    size_t n;
    char **names; /* owned; n NUL-terminated strings */
} mt_data_classes;

void mt_data_classes_fini(mt_data_classes *c);

/*
 * The class names of a spec whose labels are names: "class_names" when given; otherwise, for
 * CSV with "label_type": "string", the distinct label values of the TRAINING files and, for
 * IMAGES, the sub-folder names of the training roots (union over the roots); both sorted in
 * byte order (strcmp), so the ids are stable whatever the file order or the mesh. Zero names
 * (c->n == 0) for integer and float labels. Codes: NOT_FOUND / PERMISSION_DENIED (files),
 * INVALID_ARGUMENT (FILE:LINE of a bad record, no classes found), RESOURCE_EXHAUSTED. Blocks on
 * I/O; any thread.
 */
mt_code mt_data_classes_fit_spec(const mt_data_spec *spec, mt_data_classes *out, mt_err *err);

/*
 * Decode one PNG or JPEG file (by content, not by name) the way an IMAGES dataset does: to
 * spec->channels channels, resized (bilinear, half-pixel centres, as tf.image.resize) to
 * spec->image_size, normalised with scale/mean/std, into out[H·W·C] (caller's). Codes: NOT_FOUND,
 * PERMISSION_DENIED, INVALID_ARGUMENT ("PATH: not a PNG or JPEG file", "PATH: corrupt PNG: ..."),
 * RESOURCE_EXHAUSTED. Any thread.
 */
mt_code mt_data_image_read(const mt_data_spec *spec, const char *path, float *out, mt_err *err);

/*
 * Read the feature columns of a CSV file as a CSV dataset of `spec` would, for prediction: the
 * file needs a header, columns are found by the names of spec->feature_columns (any order,
 * other columns ignored, the label column may be absent; without feature_columns the file's
 * columns are the features in file order, minus the label column when present), and the
 * spec's missing-value policy and scale apply. *x (n, dim) is owned (mt_free). Codes: as the CSV
 * source (FILE:LINE), INVALID_ARGUMENT ("F: no column 'petal_width' (columns: ...)").
 */
mt_code mt_data_csv_read_features(const mt_data_spec *spec, const char *path, float **x, size_t *n,
                                  size_t *dim, mt_err *err);

/* ------------------------------------------------------------------ text and TF-IDF */

/*
 * Tokenizer: ASCII letters are lower-cased; a token is a maximal run of ASCII alphanumerics or
 * bytes >= 0x80 (UTF-8 sequences stay inside tokens); everything else separates. Calls
 * fn(token, len, ctx) for each token of text[0..len). Any thread.
 */
typedef void (*mt_data_token_fn)(const char *tok, size_t len, void *ctx);
void mt_data_tokenize(const char *text, size_t len, char *scratch, mt_data_token_fn fn, void *ctx);
/* `scratch` must hold len bytes; it receives the lower-cased token passed to fn. */

typedef struct mt_data_tfidf mt_data_tfidf;

/*
 * Fit a TF-IDF vectorizer as Keras TextVectorization(output_mode="tf_idf", max_tokens=M):
 * index 0 is OOV; the M-1 most frequent terms (total count over the documents, ties by byte
 * order) get indices 1..M-1 in that order; idf(t) = ln(1 + docs / (1 + doc_freq(t))); the OOV
 * idf is the mean of the term idfs; an example's feature j = count_j × idf_j. Output dim =
 * 1 + number of terms (<= M). `docs` are n borrowed strings with lengths. On MT_OK *out is owned
 * (mt_data_tfidf_free). Codes: INVALID_ARGUMENT (max_tokens < 2, no documents),
 * RESOURCE_EXHAUSTED.
 */
mt_code mt_data_tfidf_fit(const char *const *docs, const size_t *lens, size_t n, size_t max_tokens,
                          mt_data_tfidf **out, mt_err *err);

/*
 * Fit on the TRAINING split of a text spec only (reads spec->train files). Codes: as
 * mt_data_tfidf_fit plus the text source's (NOT_FOUND, INVALID_ARGUMENT with file:line).
 */
mt_code mt_data_tfidf_fit_spec(const mt_data_spec *spec, mt_data_tfidf **out, mt_err *err);

void mt_data_tfidf_free(mt_data_tfidf *v);

/* Output dimension (1 + number of terms). */
size_t mt_data_tfidf_dim(const mt_data_tfidf *v);
/* Index of a term (already lower-cased), 0 when out of vocabulary. */
size_t mt_data_tfidf_index(const mt_data_tfidf *v, const char *term, size_t len);
/* Term at index i (1..dim-1), NULL for 0 or out of range. Borrowed. */
const char *mt_data_tfidf_term(const mt_data_tfidf *v, size_t i);
/* idf weight of index i (0 = OOV). */
float mt_data_tfidf_idf(const mt_data_tfidf *v, size_t i);

/*
 * Vectorize one text (borrowed) into out[dim] (overwritten). Any thread (the vectorizer is
 * immutable). Codes: RESOURCE_EXHAUSTED (texts over 512 bytes need a scratch allocation).
 */
mt_code mt_data_tfidf_transform(const mt_data_tfidf *v, const char *text, size_t len, float *out,
                                mt_err *err);

/*
 * Serialise (text format "meshtrain-tfidf 1", documented in docs/input-pipeline.md) so the job
 * can store the vocabulary and reuse it for evaluation and prediction. *buf is owned (mt_free).
 * Load parses such a buffer (borrowed); a corrupt buffer is INVALID_ARGUMENT.
 */
mt_code mt_data_tfidf_save(const mt_data_tfidf *v, char **buf, size_t *len, mt_err *err);
mt_code mt_data_tfidf_load(const char *buf, size_t len, mt_data_tfidf **out, mt_err *err);

/* ------------------------------------------------------------------ tokens */

/*
 * Fit the tokenizer of a TOKENS spec on its TRAINING files (read whole, in spec order) with the
 * spec's type and vocab_size (core/text, deterministic). On MT_OK *out is owned
 * (mt_text_tokenizer_free). Codes: NOT_FOUND / PERMISSION_DENIED (files), INVALID_ARGUMENT
 * ("dataset.tokenizer: ..."; not a tokens spec), RESOURCE_EXHAUSTED. Blocks on I/O; any thread.
 */
mt_code mt_data_tokenizer_fit_spec(const mt_data_spec *spec, mt_text_tokenizer **out, mt_err *err);

/* ------------------------------------------------------------------ dataset */

typedef struct mt_data_dataset mt_data_dataset;

/*
 * Open one split of a spec: counts the examples of every file (a cheap scan, so every pipeline
 * can compute the same plan) without decoding them. `vec` (borrowed, must outlive the dataset)
 * is required for TEXT and ignored otherwise. On MT_OK *out is owned (mt_data_dataset_free).
 * Codes: NOT_FOUND (missing file, or the split has no files), PERMISSION_DENIED,
 * INVALID_ARGUMENT (bad file: message names file and line), RESOURCE_EXHAUSTED.
 */
mt_code mt_data_dataset_open(const mt_data_spec *spec, mt_data_split split,
                             const mt_data_tfidf *vec, mt_data_dataset **out, mt_err *err);

/*
 * An in-memory dataset (tests, benchmarks, prediction input): `blocks` are copied, one "file"
 * per block; all must have the same dim. Codes: INVALID_ARGUMENT, RESOURCE_EXHAUSTED.
 */
mt_code mt_data_dataset_from_blocks(const mt_data_block *blocks, size_t n_blocks,
                                    mt_data_dataset **out, mt_err *err);

void mt_data_dataset_free(mt_data_dataset *ds);

/* TOKENS: the tokenizer fitted on the training files at open (borrowed); NULL otherwise. */
const mt_text_tokenizer *mt_data_dataset_tokenizer(const mt_data_dataset *ds);

/* The dataset's class names (mt_data_classes_fit_spec, fitted once at open on the training
 * files); borrowed, n == 0 for integer and float labels. */
const mt_data_classes *mt_data_dataset_classes(const mt_data_dataset *ds);

size_t mt_data_dataset_num_files(const mt_data_dataset *ds);
/* Examples in file f (0 when f is out of range). */
size_t mt_data_dataset_file_size(const mt_data_dataset *ds, size_t f);
/* Examples in all files. */
size_t mt_data_dataset_size(const mt_data_dataset *ds);
/* Borrowed array of num_files sizes. */
const size_t *mt_data_dataset_file_sizes(const mt_data_dataset *ds);
/* Name of file f for messages (borrowed). */
const char *mt_data_dataset_file_name(const mt_data_dataset *ds, size_t f);

/*
 * Decode file f into *out (caller memory; mt_data_block_fini). A file whose decoded count differs
 * from the counted one is DATA_LOSS (it changed under us). Codes: as the source's, OUT_OF_RANGE
 * for a bad f. Blocks on I/O. Not concurrently on one dataset.
 */
mt_code mt_data_dataset_load(mt_data_dataset *ds, size_t f, mt_data_block *out, mt_err *err);

/* ------------------------------------------------------------------ rebatch and plan */

/*
 * tf.distribute's rebatch rule: a batch of n examples over `replicas` replicas is cut into pieces
 * of c = ceil(n / replicas); replica r gets [*start, *start + *len) with start = min(r·c, n) and
 * len = min(c, n - start). Examples: n=4,R=5 → [0],[1],[2],[3],[]; n=4,R=3 → [0,1],[2,3],[];
 * n=2,R=2 → [4],[5] (offsets 0 and 1). Pure; replicas >= 1, r < replicas.
 */
void mt_data_rebatch_split(size_t n, size_t replicas, size_t r, size_t *start, size_t *len);

/* AUTO → FILE when num_files >= num_pipelines, else DATA (logs the choice at INFO); others
 * unchanged. */
mt_data_shard_policy mt_data_shard_resolve(mt_data_shard_policy p, size_t num_files,
                                           size_t num_pipelines);

/*
 * The input context a per-pipeline input function receives (tf.distribute.InputContext) plus
 * the feature slice this pipeline's devices consume (spatial partitioning of [batch, feature]).
 */
typedef struct mt_data_input_ctx {
    size_t num_pipelines;         /* workers (input pipelines), >= 1 */
    size_t pipeline_id;           /* 0 .. num_pipelines-1 */
    size_t replicas_per_pipeline; /* local replicas (data-parallel devices) of this pipeline */
    size_t global_batch;          /* the user's batch_size */
    size_t feature_offset;        /* first feature delivered */
    size_t feature_len;           /* features delivered; 0 = all from feature_offset */
} mt_data_input_ctx;

#define MT_DATA_INPUT_CTX_DEFAULTS                                                                 \
    {                                                                                              \
        1, 0, 1, 32, 0, 0                                                                          \
    }

/* Total replicas = num_pipelines × replicas_per_pipeline. */
size_t mt_data_input_ctx_num_replicas(const mt_data_input_ctx *ctx);
/* tf's get_per_replica_batch_size: global_batch / replicas; INVALID_ARGUMENT if not divisible. */
mt_code mt_data_input_ctx_per_replica_batch(const mt_data_input_ctx *ctx, size_t *out, mt_err *err);

typedef struct mt_data_plan mt_data_plan;

typedef struct mt_data_plan_opts {
    mt_data_shard_policy policy; /* AUTO is resolved against the number of files */
    mt_data_batching batching;
    size_t num_pipelines;         /* N >= 1 */
    size_t replicas_per_pipeline; /* L >= 1; total replicas R = N·L */
    size_t global_batch;          /* B >= 1 */
    bool drop_remainder;
    size_t leaf_examples; /* > 0 (mesh_invariant, docs/reproducibility.md): global batching
                             gives replica r of R the examples of leaves [r·L/R, (r+1)·L/R) of
                             leaf_examples each (L = B / leaf_examples), also in a short batch;
                             0: the even split of mt_data_rebatch_split */
} mt_data_plan_opts;

/*
 * Build the plan of one epoch for every pipeline from the per-file example counts (borrowed).
 * Every pipeline builds an identical plan. Codes: INVALID_ARGUMENT (zero sizes of N, L or B; no
 * files; per-replica batching with B not divisible by R), RESOURCE_EXHAUSTED. *out owned.
 *
 * Each pipeline w has a stream S_w of positions 0..mt_data_plan_stream_len(w)-1:
 *   FILE: the examples of files f with f % N == w, in file order;  OFF: all examples;
 *   DATA + global batching: all examples;  DATA + per-replica: examples i with i % N == w.
 * (Shuffling permutes the examples before they are laid out in S_w; see the pipeline.)
 */
mt_code mt_data_plan_new(const size_t *file_sizes, size_t n_files, const mt_data_plan_opts *opts,
                         mt_data_plan **out, mt_err *err);
void mt_data_plan_free(mt_data_plan *plan);

/* The resolved policy (never AUTO). */
mt_data_shard_policy mt_data_plan_policy(const mt_data_plan *plan);
/*
 * Steps per epoch; the same for every pipeline: the longest pipeline's count, minus the steps in
 * which every replica of every pipeline would be empty (those are skipped everywhere, so a step
 * always has global_count >= 1).
 */
size_t mt_data_plan_steps(const mt_data_plan *plan);
/* Whether pipeline w must read file f. */
bool mt_data_plan_reads_file(const mt_data_plan *plan, size_t w, size_t f);
/* Length of pipeline w's stream S_w. */
size_t mt_data_plan_stream_len(const mt_data_plan *plan, size_t w);
/*
 * Replica l of pipeline w at step s gets positions [*start, *start + *len) of S_w; *len may be 0
 * (an empty batch: the replica contributes zero gradient). Steps past the end give len 0.
 */
void mt_data_plan_range(const mt_data_plan *plan, size_t w, size_t step, size_t l, size_t *start,
                        size_t *len);
/* Examples in the global batch of `step` (sum over all N·L replicas). The loss divides by it. */
size_t mt_data_plan_global_count(const mt_data_plan *plan, size_t step);

/*
 * tf.data's shuffle(buffer_size) applied to order[0..n): a buffer of min(buffer, n) slots is
 * filled from the input; each output is a uniformly chosen slot, refilled from the input. The
 * random stream is a function of (seed, epoch) only. buffer <= 1 leaves the order unchanged.
 * `scratch` holds min(buffer, n) entries. Pure; any thread.
 */
void mt_data_shuffle(uint32_t *order, size_t n, size_t buffer, uint64_t seed, uint64_t epoch,
                     uint32_t *scratch);

/* ------------------------------------------------------------------ pipeline */

typedef struct mt_data_pipeline_opts {
    mt_data_shard_policy policy;
    mt_data_batching batching;
    bool drop_remainder;
    size_t shuffle_buffer; /* 0 or 1: no shuffling */
    uint64_t seed;
    size_t prefetch; /* steps assembled ahead of the held one on the pipeline's thread (P + 1
                        preallocated slots); 0 = synchronous */
    /* a uniform permutation of the pre-shard stream per epoch, mt_rng_permutation(seed, epoch)
       (the training engine's order; tf's shuffle with a buffer >= the dataset) instead of the
       buffered shuffle; shuffle_buffer is then ignored */
    bool permute;
    /* global replica index of local replica l of pipeline w is w·L + l (meshtrain's batch
       coordinates); under DATA + global batching it gets piece w·L + l of every global batch,
       so a replica's examples depend only on its index, not on N. false: tf.distribute's
       l·N + w */
    bool contiguous_replicas;
    /* training augmentation of image examples (mt_data_augment); the file's shape must be an
       image (H, W, C) when set */
    mt_data_augment augment;
    size_t leaf_examples; /* mt_data_plan_opts.leaf_examples; 0: the even split */
} mt_data_pipeline_opts;

#define MT_DATA_PIPELINE_OPTS_DEFAULTS                                                             \
    {                                                                                              \
        MT_DATA_SHARD_AUTO, MT_DATA_BATCH_GLOBAL, false, 0, 0, 2, false, false,                    \
            {MT_DATA_FLIP_NONE, 0}, 0                                                              \
    }

/* The pipeline options a spec asks for. */
void mt_data_pipeline_opts_from_spec(const mt_data_spec *spec, mt_data_pipeline_opts *out);

/* One replica's batch. Pointers are borrowed from the pipeline (valid until the next _next). */
typedef struct mt_data_batch {
    size_t n;            /* examples in this replica batch; 0 is valid (empty batch) */
    size_t dim;          /* features per example as delivered (the slice length) */
    const float *x;      /* (n, dim) row-major; NULL when n == 0 */
    const int32_t *y;    /* (n, y_dim) class labels (zeros when the labels are float targets) */
    size_t global_count; /* examples in the step's global batch over ALL replicas */
    const float *t;      /* (n, t_dim) float targets; NULL for class labels or n == 0 */
    size_t t_dim;        /* float targets per example; 0 for class labels */
    size_t y_dim;        /* class labels per example (>= 1) */
} mt_data_batch;

typedef struct mt_data_step {
    size_t epoch;
    size_t step;                   /* 0-based within the epoch */
    size_t global_count;           /* examples in the global batch (loss divisor) */
    size_t n_replicas;             /* local replicas */
    const mt_data_batch *replicas; /* n_replicas entries */
} mt_data_step;

typedef struct mt_data_pipeline mt_data_pipeline;

/*
 * Open pipeline ctx->pipeline_id over `ds` (borrowed; must outlive the pipeline): builds the
 * plan, decodes the files this pipeline reads (errors name file and line). On MT_OK *out is
 * owned (mt_data_pipeline_free). Codes: INVALID_ARGUMENT (bad ctx/options, feature slice outside
 * dim), the dataset's load codes, RESOURCE_EXHAUSTED.
 */
mt_code mt_data_pipeline_open(mt_data_dataset *ds, const mt_data_input_ctx *ctx,
                              const mt_data_pipeline_opts *opts, mt_data_pipeline **out,
                              mt_err *err);

/* Borrowed plan (steps per epoch, global counts). */
const mt_data_plan *mt_data_pipeline_plan(const mt_data_pipeline *p);
/* Steps per epoch (identical on every pipeline). */
size_t mt_data_pipeline_steps(const mt_data_pipeline *p);
/* Features per delivered example. */
size_t mt_data_pipeline_dim(const mt_data_pipeline *p);
/* H, W, C of the decoded examples when they are images (all 0 when flat); shape[3] caller's. */
void mt_data_pipeline_shape(const mt_data_pipeline *p, size_t shape[3]);
/* Float targets per example (0 for class labels). */
size_t mt_data_pipeline_target_dim(const mt_data_pipeline *p);
/* Class labels per example (>= 1; the same in every file, else the open fails). */
size_t mt_data_pipeline_label_dim(const mt_data_pipeline *p);

/*
 * Begin epoch `epoch`: shuffles for (seed, epoch) and starts the prefetch thread (when
 * prefetch > 0). Stops an epoch still running. Codes: RESOURCE_EXHAUSTED, INTERNAL (thread).
 */
mt_code mt_data_pipeline_start_epoch(mt_data_pipeline *p, size_t epoch, mt_err *err);

/*
 * Next step of the epoch: MT_OK and *out (borrowed until the next call on p), or OUT_OF_RANGE
 * after the last step (every pipeline reaches it at the same step). FAILED_PRECONDITION before
 * start_epoch. With prefetch, a step that is not ready yet is waited for; while waiting, the
 * caller builds the next unclaimed step itself when a slot is free (so prefetch never delivers
 * less than building synchronously). Zero-copy steps (no shuffle, no slice) are always built in
 * the caller.
 */
mt_code mt_data_pipeline_next(mt_data_pipeline *p, const mt_data_step **out, mt_err *err);

/* Stop the prefetch thread (joins it) and free everything; NULL is a no-op. Never hangs. */
void mt_data_pipeline_free(mt_data_pipeline *p);

/*
 * Spatial partitioning helper: copy features [offset, offset+len) of each of b's n examples into
 * dst (n, len). INVALID_ARGUMENT when the slice is outside b->dim.
 */
mt_code mt_data_batch_copy_slice(const mt_data_batch *b, size_t offset, size_t len, float *dst,
                                 mt_err *err);

#endif
