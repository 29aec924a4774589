/* SPDX-License-Identifier: MIT */
/*
 * mt_pathsafe.h — confine the file paths of a job spec to configured data roots.
 *
 * A job spec names files (dataset files and globs, checkpoint directories) that a worker or
 * `meshtrain train --local` opens on behalf of whoever submitted the job. A root set lists the
 * directories such paths may lie under (`--data-root DIR`, repeatable); every path is resolved
 * with realpath(3) — symbolic links, `.`/`..`, relative paths against the current directory —
 * and refused with PERMISSION_DENIED, naming the path, what it resolves to and the roots, when
 * the result is not a root or below one. So a spec cannot make a daemon read /etc/shadow through
 * "../../etc/shadow", an absolute path, or a symlink placed inside a root that points out of it.
 * Default roots (mt_pathsafe_add_defaults, used when no --data-root is given): the current
 * working directory and /usr/share/datasets (where the Debian dataset packages install).
 *
 * Called by worker/ (its --data-root) and client/cmd_train.c; the checks are the caller's duty
 * right before opening the files (a file swapped for a symlink after the check is out of scope:
 * the roots are directories the operator controls).
 * Threading: a root set is immutable after setup; checks are thread-safe. Tests:
 * tests/unit/test_pathsafe.c.
 */
#ifndef MT_PATHSAFE_H
#define MT_PATHSAFE_H

#include <stddef.h>

#include "status/mt_status.h"

struct cJSON;

#define MT_PATHSAFE_MAX_ROOTS        16
#define MT_PATHSAFE_DEFAULT_DATASETS "/usr/share/datasets"

struct mt_job_spec;
struct mt_data_spec;

typedef struct mt_pathsafe mt_pathsafe;

/* flags of mt_pathsafe_check */
enum {
    MT_PATHSAFE_MAY_BE_MISSING = 1, /* the path may not exist yet (a checkpoint directory) */
};

/* An empty root set (refuses every path). Returns owned *out; RESOURCE_EXHAUSTED. */
mt_code mt_pathsafe_new(mt_pathsafe **out, mt_err *err);

/* Free; NULL is a no-op. */
void mt_pathsafe_free(mt_pathsafe *ps);

/*
 * Add the directory `dir` (borrowed; resolved with realpath now). NOT_FOUND when it does not
 * exist, INVALID_ARGUMENT when it is not a directory, RESOURCE_EXHAUSTED beyond
 * MT_PATHSAFE_MAX_ROOTS roots.
 */
mt_code mt_pathsafe_add_root(mt_pathsafe *ps, const char *dir, mt_err *err);

/* Add the default roots: the current directory (unless it is "/", which would confine
 * nothing) and /usr/share/datasets when it exists. */
mt_code mt_pathsafe_add_defaults(mt_pathsafe *ps, mt_err *err);

/*
 * The root set of a daemon's command line: the n directories `dirs` (borrowed; the values of
 * --data-root), or the defaults when n == 0. Returns owned *out; the codes of add_root.
 */
mt_code mt_pathsafe_new_roots(const char *const *dirs, int n, mt_pathsafe **out, mt_err *err);

/* Number of roots and the i-th (resolved, borrowed; NULL when out of range). */
size_t mt_pathsafe_root_count(const mt_pathsafe *ps);
const char *mt_pathsafe_root_at(const mt_pathsafe *ps, size_t i);

/*
 * Check that `path` (borrowed) resolves under a root. On MT_OK and when `resolved` is not NULL,
 * writes the resolved path there (cap bytes). Codes: PERMISSION_DENIED ("path X resolves to Y,
 * outside the data roots A, B"), NOT_FOUND (missing, unless MT_PATHSAFE_MAY_BE_MISSING; then the
 * deepest existing ancestor is resolved and the missing rest may not contain ".."),
 * INVALID_ARGUMENT (empty path, too long, or `..` in the missing part).
 */
mt_code mt_pathsafe_check(const mt_pathsafe *ps, const char *path, int flags, char *resolved,
                          size_t cap, mt_err *err);

/*
 * Expand the glob(3) `pattern` and check every match. NOT_FOUND when nothing matches,
 * otherwise as mt_pathsafe_check (the first match outside the roots is named).
 */
mt_code mt_pathsafe_check_glob(const mt_pathsafe *ps, const char *pattern, mt_err *err);

/*
 * Check the four dataset files of a job spec whose dataset format is "idx" (core/model; empty
 * names are skipped; other formats pass: see mt_pathsafe_check_dataset_json). A missing
 * file inside a root passes (its loader reports NOT_FOUND with its own message); outside the
 * roots it is PERMISSION_DENIED whether it exists or not, so existence outside is not revealed.
 */
mt_code mt_pathsafe_check_job_spec(const mt_pathsafe *ps, const struct mt_job_spec *spec,
                                   mt_err *err);

/* Check every file (and IDX labels file) of both splits of a data spec (core/data), as above. */
mt_code mt_pathsafe_check_data_spec(const mt_pathsafe *ps, const struct mt_data_spec *spec,
                                    mt_err *err);

/*
 * Check the files of the "dataset" section of a job spec (JSON text, borrowed) in the
 * input-pipeline form (a "train" key; format text, csv or idx pairs): the section is parsed with
 * mt_data_spec_parse (relative paths against base_dir; globs expanded) and every file checked.
 * A section without "train", or a synthetic one, passes. Codes: as mt_pathsafe_check plus the
 * data spec parser's (INVALID_ARGUMENT, NOT_FOUND for a missing file or empty glob).
 */
mt_code mt_pathsafe_check_dataset_json(const mt_pathsafe *ps, const char *spec_json, size_t len,
                                       const char *base_dir, mt_err *err);

/* mt_pathsafe_check_dataset_json on the parsed "dataset" section (node, borrowed; NULL passes). */
mt_code mt_pathsafe_check_dataset(const mt_pathsafe *ps, const struct cJSON *node,
                                  const char *base_dir, mt_err *err);

#endif
