/* SPDX-License-Identifier: MIT */
/*
 * mt_jobspec.h — the job spec parsed once into a typed, owned struct (mt_jobspec), and the one
 * validation of a whole spec, with a summary of what it asks for.
 *
 * How it fits: every process parses a spec's text once with mt_jobspec_parse and hands the typed
 * sections to the modules that use them: `meshtrain train --local` (client/cmd_train.c) and the
 * worker's task (worker/task.c) pass js->model, js->cfg and js->dataset to mt_spmd_train.
 * Validation: `meshtrain plan`, `train --local` and the worker's task run the same checks
 * (mt_jobspec_validate / _opts / mt_jobspec_check), so whatever one refuses the others refuse
 * with the same message; SubmitJob (coordinator/jobs.c) runs the part that needs no file
 * (mt_jobspec_validate_structure). The parse calls core/model (mt_job_spec_from_json: top-level
 * fields, optimizer, model graph, fsdp, IDX dataset files) and core/spmd (mt_spmd_config_from_json:
 * mesh, layouts, input layout, checkpoint); the check adds core/data (mt_data_spec_parse, when the
 * dataset uses the input-pipeline form with "train"; the synthetic section), the mesh (or the
 * --mesh override), core/spmd's planner (mt_spmd_check: the trainer's own shape, layout and
 * sharding rules and messages) and the "checkpoint", "restart", "elastic" and "init_from"
 * sections. The first problem wins; its message starts with the JSON path of the offending
 * field: `mesh.model: size must be an integer >= 1, got 0`.
 *
 * mt_jobspec_validate / _check read the IDX headers of the training set (a few bytes, gzip or
 * plain) when the spec does not give model.input_shape and to count the examples for
 * total_steps; an unreadable file is NOT_FOUND naming the field and the path; a named file that
 * is not a regular file (FIFO, device) is refused before anything is opened.
 * mt_jobspec_validate_structure (SubmitJob) opens no file at all.
 * Threading: pure apart from those reads; any thread; no shared state.
 * Tests: tests/unit/test_jobspec.c.
 */
#ifndef MT_JOBSPEC_H
#define MT_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "model/mt_model.h"
#include "spmd/mt_spmd.h"
#include "status/mt_status.h"

#define MT_JOBSPEC_MAX_DIMS   8
#define MT_JOBSPEC_MAX_SIZE   (16u << 20)         /* a spec longer than 16 MiB is refused */
#define MT_JOBSPEC_MAX_PARAMS ((uint64_t)1 << 26) /* parameter elements of a model (256 MiB) */

/* What a validated spec asks for (every field filled by mt_jobspec_validate). */
/* The collective deadline a worker uses when a spec sets no "restart.collective_deadline_ms";
 * the coordinator checks it against its heartbeat window at startup (coordinator/sched.h). */
#define MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS 30000

typedef struct mt_jobspec_summary {
    char name[128];                           /* the spec's "name" ("" when absent) */
    int mesh_ndims;                           /* 1..8; a spec without "mesh" is batch=1 */
    char mesh_names[MT_JOBSPEC_MAX_DIMS][32]; /* dimension names, in mesh order */
    int mesh_sizes[MT_JOBSPEC_MAX_DIMS];      /* dimension sizes */
    char mesh_text[256];                      /* "batch=4,model=2" */
    int n_devices;                            /* product of the mesh sizes */
    uint64_t batch_size;                      /* global batch */
    int64_t epochs;                           /* 0 when only steps is set */
    int64_t steps;                            /* step cap, 0 when not set */
    uint64_t train_examples;                  /* from the IDX header; 0 when unknown */
    uint64_t steps_per_epoch;                 /* ceil(train_examples / batch); 0 when unknown */
    uint64_t total_steps;                     /* steps the job will run; 0 when unknown */
    int input_rank;                           /* per-example input shape used for the model */
    size_t input_shape[3];
    size_t n_params;                  /* parameters incl. non-trainable state */
    uint64_t param_elements;          /* global elements over all parameters */
    uint64_t weight_bytes_per_device; /* float32 bytes of the parameter shards one device holds */
    uint64_t optimizer_bytes_per_device;  /* Adam m+v / SGD velocity of those shards */
    uint64_t gathered_bytes_per_device;   /* FSDP working copies (allgathered values, gradients) */
    uint64_t activation_bytes_per_device; /* layer outputs and their gradients, local batch */
    uint64_t work_bytes_per_device;       /* of which the work area the layers share */
    uint64_t comm_bytes_per_step[MT_JOBSPEC_MAX_DIMS]; /* per mesh dim: float32 bytes one device
                                                          hands to collectives per step */
    int halo_dim;                 /* the mesh dim an image's height is sharded over, or -1 */
    uint64_t halo_bytes_per_step; /* of that dim's bytes: what one device sends in the height
                                     bands' halo exchanges per step (docs/spmd.md) */
    uint32_t ckpt_every_steps;    /* "checkpoint.every_steps"; 0 = no checkpoints */
    uint32_t ckpt_keep;           /* "checkpoint.keep", default 3 */
    uint32_t max_restarts;        /* "restart.max_restarts", default 3 */
    uint32_t coll_deadline_ms;    /* "restart.collective_deadline_ms" (100..3600000): how long a
                                     collective waits for a peer before it fails the attempt;
                                     0 = the worker's default,
                                     MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS */
    char init_job[32];  /* "init_from.job": start from that job's checkpoint; "" = fresh */
    uint32_t init_step; /* "init_from.step"; 0 = that job's latest complete checkpoint */
    /* "elastic" bounds (defaults 1 and 65536); both 0 when the spec has no "elastic" section or
     * its mesh is not purely data-parallel (one dimension, named "batch"): it is then ignored */
    uint32_t elastic_min_batch;
    uint32_t elastic_max_batch;
    /* "reproducibility": "mesh_invariant": the leaves a global batch is cut into (the batch
     * dimension sizes that keep the bits are the powers of two up to it); 0 = fixed_mesh */
    uint32_t repro_leaves;
} mt_jobspec_summary;

/*
 * Validate the job spec json[0..len) (borrowed; need not be NUL-terminated) completely.
 * On MT_OK *out (caller-provided) holds the summary. On failure *out is zeroed and err->msg is
 * "<json path>: <why>".
 * Codes: INVALID_ARGUMENT (any invalid field, not JSON, longer than MT_JOBSPEC_MAX_SIZE; a
 * layout that does not divide a parameter of the model), NOT_FOUND (a dataset file that does
 * not exist), RESOURCE_EXHAUSTED (a model beyond MT_JOBSPEC_MAX_PARAMS parameter elements,
 * a batch or a layer output beyond core/model's MT_MODEL_LIMITS_DEFAULTS — checked with
 * mt_model_check_limits from the layer list before anything is allocated — or out of memory).
 * Cost: builds the model once without optimizer state (weights and gradients, batch 1) to get
 * the parameter shapes; call it off latency-sensitive threads.
 */
mt_code mt_jobspec_validate(const char *json, size_t len, mt_jobspec_summary *out, mt_err *err);

/* ------------------------------------------------------------------ the typed spec */

/*
 * A job spec parsed once. Every process parses the text with mt_jobspec_parse and hands the
 * typed sections to the modules that use them; nothing parses the text again. Owned by the
 * caller (mt_jobspec_free); the borrowed pointers live as long as the spec.
 */
typedef struct mt_jobspec {
    char *json;                  /* owned, NUL-terminated copy of the text (checkpoints keep it) */
    size_t len;                  /* its length */
    struct cJSON *root;          /* owned: the parsed text */
    mt_job_spec *model;          /* owned: top-level fields, optimizer, model, fsdp (core/model) */
    mt_spmd_config cfg;          /* owned: mesh, layouts, input layout, checkpoint (core/spmd) */
    const struct cJSON *dataset; /* borrowed from root: the "dataset" section (core/data reads
                                    it), or NULL (the Fashion-MNIST defaults) */
} mt_jobspec;

/*
 * Parse json[0..len) (borrowed) once into *out (owned) and check every section's structure
 * (fields, types, ranges, layer graph, mesh, layout syntax) — no file is opened. Messages start
 * with the field's JSON path. Codes: INVALID_ARGUMENT (also longer than MT_JOBSPEC_MAX_SIZE, not
 * JSON), RESOURCE_EXHAUSTED. On failure *out = NULL.
 */
mt_code mt_jobspec_parse(const char *json, size_t len, mt_jobspec **out, mt_err *err);

/* Read the file at path and mt_jobspec_parse it, its relative dataset paths made relative to
 * the file's folder first (mt_jobspec_absolute_paths; "examples/x.json" naming "data/a.tsv"
 * reads "examples/data/a.tsv"). NOT_FOUND / PERMISSION_DENIED ("open PATH: why"),
 * INVALID_ARGUMENT naming the file. */
mt_code mt_jobspec_load(const char *path, mt_jobspec **out, mt_err *err);

/* Free a spec; NULL is a no-op. */
void mt_jobspec_free(mt_jobspec *js);

/* Where a spec is validated from (mt_jobspec_validate_opts). */
typedef struct mt_jobspec_opts {
    const char *base_dir; /* relative dataset paths resolve against it: the spec's folder
                             (NULL: the working directory; for validate_structure NULL means
                             relative paths are refused) */
    const char *mesh;     /* "batch=4,model=2" replacing the spec's "mesh" (--mesh), or NULL */
    /* out (meshtrain plan --layers): NULL, or room for 256 layers, filled with each layer's
     * output shape, buffers and collective bytes per mesh dim (core/spmd); *n_layers their count */
    struct mt_spmd_layer_plan *layers;
    int *n_layers;
} mt_jobspec_opts;

#define MT_JOBSPEC_OPTS_DEFAULTS                                                                   \
    {                                                                                              \
        NULL, NULL, NULL, NULL                                                                     \
    }

/*
 * mt_jobspec_validate from the CLI's point of view: `meshtrain train --local` and `plan` pass
 * the spec's folder and their --mesh, so they refuse exactly what the trainer would, with the
 * same message. opts may be NULL (the defaults). Codes: as mt_jobspec_validate; a malformed
 * opts->mesh is INVALID_ARGUMENT "--mesh: ...".
 */
mt_code mt_jobspec_validate_opts(const char *json, size_t len, const mt_jobspec_opts *opts,
                                 mt_jobspec_summary *out, mt_err *err);

/* The checks of mt_jobspec_validate that follow parsing (data shape, the trainer's planner,
 * the sections), on a parsed spec (borrowed). Codes: as mt_jobspec_validate. */
mt_code mt_jobspec_check(const mt_jobspec *js, const mt_jobspec_opts *opts, mt_jobspec_summary *out,
                         mt_err *err);

/*
 * Validate the spec's structure only, opening no file: what the coordinator runs at SubmitJob
 * (a scheduler must not read data as its own user: docs/security.md). Checked: syntax, every
 * section's fields, the mesh (or opts->mesh), the dataset section's file fields (types; with
 * opts->base_dir NULL every path must be absolute: INVALID_ARGUMENT "dataset.train: relative path
 * '...' in a spec without its folder ..."), and — when the spec's model.input_shape or its
 * dataset section (CSV "shape"/"feature_columns", text "max_tokens", synthetic) fixes the input
 * shape — the model and its layouts as mt_jobspec_check does. What needs the files (IDX headers,
 * example counts, CSV headers, globs) is left to mt_jobspec_check on the worker, whose messages
 * are the same as `plan`'s. out->train_examples, steps_per_epoch and (without "steps") total_steps
 * are 0 unless the dataset is synthetic; the per-device byte counts are 0 when the input shape
 * is not known. Codes: as mt_jobspec_validate without NOT_FOUND.
 */
mt_code mt_jobspec_validate_structure(const char *json, size_t len, const mt_jobspec_opts *opts,
                                      mt_jobspec_summary *out, mt_err *err);

/* ------------------------------------------------------------------ dataset paths
 *
 * The one rule (docs/job-spec.md, "Dataset paths"): a relative dataset path is relative to the
 * folder of the spec file, for `train --local`, `plan` and `submit` alike. mt_jobspec_load applies
 * it; `meshtrain submit` sends the spec with its relative paths made absolute against the file's
 * folder, so workers read exactly the files `plan` checked. The dataset fields holding paths: the
 * flat IDX keys (train_images, train_labels, test_images, test_labels) and "train"/"test" in
 * every form (a path or glob, a list, {"files": [...]}, {"glob": "p"}, IDX {"images", "labels"}).
 */

/*
 * Rewrite each relative dataset path of the spec text json[0..len) (borrowed) as base_dir/path.
 * *out (owned, NUL-terminated, *out_len bytes) is the rewritten text, or a copy of json when
 * nothing was relative or the text is not a valid spec (the validation words that). Opens no
 * file. Codes: RESOURCE_EXHAUSTED; INVALID_ARGUMENT when a joined path exceeds
 * MT_SPEC_PATH_MAX.
 */
mt_code mt_jobspec_absolute_paths(const char *json, size_t len, const char *base_dir, char **out,
                                  size_t *out_len, mt_err *err);

struct mt_pathsafe;

/*
 * Check every file the dataset section of js (borrowed) names, globs expanded, relative paths
 * against base_dir (NULL: the working directory), without opening any: with roots (borrowed,
 * may be NULL) each must lie under them (mt_pathsafe_check: PERMISSION_DENIED whether it exists
 * or not); each one that exists must be a regular file — a FIFO, device, socket or directory is
 * INVALID_ARGUMENT "dataset.train_images: /d/p is a FIFO, not a regular file ..." (a FIFO would
 * block the reader forever). A missing file passes (its reader says NOT_FOUND). mt_jobspec_check
 * runs it (roots NULL) before reading anything; the worker runs it with its --data-root set.
 * Threading: any thread; stat(2) and glob(3) only.
 */
mt_code mt_jobspec_check_files(const mt_jobspec *js, const char *base_dir,
                               const struct mt_pathsafe *roots, mt_err *err);

#endif
