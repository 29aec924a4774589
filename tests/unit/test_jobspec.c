/* SPDX-License-Identifier: MIT */
/*
 * test_jobspec.c — mt_jobspec_validate: a valid spec's summary (mesh, devices, steps, per-device
 * bytes), and a table of invalid specs, each refused with the JSON path of its field.
 */
#include "mt_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "jobspec/mt_jobspec.h"

/* An MLP on Fashion-MNIST; %s is spliced in before the closing brace. */
#define BASE_FMT                                                                                   \
    "{\"name\": \"mlp\", \"batch_size\": 100, \"epochs\": 2,"                                      \
    " \"model\": {\"input_shape\": [28, 28, 1], \"layers\": [{\"type\": \"flatten\"},"             \
    " {\"type\": \"dense\", \"units\": 64, \"activation\": \"relu\"},"                             \
    " {\"type\": \"dense\", \"units\": 10}]}%s}"

static mt_code check(const char *extra, mt_jobspec_summary *s, mt_err *err)
{
    char buf[4096];

    snprintf(buf, sizeof(buf), BASE_FMT, extra);
    return mt_jobspec_validate(buf, strlen(buf), s, err);
}

static void test_jobspec_valid_summary(void **state)
{
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    (void)state;

    assert_int_equal(check(", \"mesh\": {\"batch\": 2, \"model\": 2},"
                           " \"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"]},"
                           " \"checkpoint\": {\"every_steps\": 50, \"keep\": 2},"
                           " \"restart\": {\"max_restarts\": 5},"
                           " \"init_from\": {\"job\": \"job-000003\", \"step\": 76}",
                           &s, &err),
                     MT_OK);
    assert_string_equal(s.name, "mlp");
    assert_int_equal(s.n_devices, 4);
    assert_int_equal(s.mesh_ndims, 2);
    assert_string_equal(s.mesh_names[1], "model");
    assert_int_equal(s.mesh_sizes[0], 2);
    assert_int_equal(s.train_examples, 60000);
    assert_int_equal(s.steps_per_epoch, 600);
    assert_int_equal(s.total_steps, 1200);
    assert_int_equal(s.ckpt_every_steps, 50);
    assert_int_equal(s.ckpt_keep, 2);
    assert_int_equal(s.max_restarts, 5);
    assert_string_equal(s.init_job, "job-000003");
    assert_int_equal(s.init_step, 76);
    assert_int_equal(s.elastic_min_batch, 0); /* no "elastic" */
    assert_int_equal(s.elastic_max_batch, 0);
    /* dense_1.kernel (784x64) halved over model and its bias with it (the trainer derives the
     * bias layout from the kernel's); the rest replicated; Adam: two slots */
    uint64_t w = (784 * 64 / 2 + 64 / 2 + 64 * 10 + 10) * 4;
    assert_int_equal(s.weight_bytes_per_device, w);
    assert_int_equal(s.optimizer_bytes_per_device, 2 * w);
    assert_int_equal(s.gathered_bytes_per_device, 0);
    assert_int_equal(s.param_elements, 784 * 64 + 64 + 640 + 10);
    /* per step: batch gets the gradient bucket (the shards, + 5 loss and metric sums and the next
     * step's example count); model gets
     * dense_2's partial-sum allreduce... no: dense_1's output is sharded, dense_2 contracts
     * replicated, so the reshard gathers dense_2's input over model */
    assert_int_equal(s.comm_bytes_per_step[0], (784 * 64 / 2 + 64 / 2 + 640 + 10 + 6) * 4);
    assert_true(s.comm_bytes_per_step[1] > 0);

    /* FSDP: every kernel over batch; the device stores halves and gathers the whole copies */
    assert_int_equal(check(", \"mesh\": {\"batch\": 2},"
                           " \"layouts\": {\"dense_.*kernel\": [\"batch\", \"unsharded\"]}",
                           &s, &err),
                     MT_OK);
    w = (784 * 64 / 2 + 64 + 64 * 10 / 2 + 10) * 4;
    assert_int_equal(s.weight_bytes_per_device, w);
    assert_int_equal(s.optimizer_bytes_per_device, 2 * w);
    /* per layer (the default): the largest layer's gathered value and gradient */
    assert_int_equal(s.gathered_bytes_per_device, 2 * (784 * 64) * 4);
    assert_int_equal(
        check(", \"mesh\": {\"batch\": 2}, \"fsdp\": {\"reshard_after_forward\": false},"
              " \"layouts\": {\"dense_.*kernel\": [\"batch\", \"unsharded\"]}",
              &s, &err),
        MT_OK);
    assert_int_equal(s.gathered_bytes_per_device, 2 * (784 * 64 + 640) * 4); /* every copy kept */
    assert_int_equal(check(", \"fsdp\": {\"reshard\": false}", &s, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "fsdp.reshard: unknown field");
}

static void test_jobspec_defaults_and_steps_cap(void **state)
{
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    const char *spec = "{\"steps\": 7, \"model\": {\"layers\": [{\"type\": \"flatten\"},"
                       " {\"type\": \"dense\", \"units\": 10}]}}";
    (void)state;

    assert_int_equal(mt_jobspec_validate(spec, strlen(spec), &s, &err), MT_OK);
    assert_int_equal(s.n_devices, 1);
    assert_string_equal(s.mesh_text, "batch=1");
    assert_int_equal(s.total_steps, 7);
    /* input shape from the IDX header */
    assert_int_equal(s.input_rank, 3);
    assert_int_equal(s.input_shape[0], 28);
    assert_int_equal(s.ckpt_keep, 3);
    assert_int_equal(s.ckpt_every_steps, 0);
}

static void test_jobspec_elastic_bounds(void **state)
{
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    (void)state;

    /* a data-parallel mesh: the bounds, max defaults to 65536 */
    assert_int_equal(check(", \"mesh\": {\"batch\": 2}, \"elastic\": {\"min_batch\": 1, "
                           "\"max_batch\": 4}",
                           &s, &err),
                     MT_OK);
    assert_int_equal(s.elastic_min_batch, 1);
    assert_int_equal(s.elastic_max_batch, 4);
    assert_int_equal(check(", \"elastic\": {\"min_batch\": 2}", &s, &err), MT_OK);
    assert_int_equal(s.elastic_min_batch, 2);
    assert_int_equal(s.elastic_max_batch, 65536);
    /* another mesh keeps its shape: accepted, ignored */
    assert_int_equal(check(", \"mesh\": {\"batch\": 2, \"model\": 2}, \"elastic\": {}", &s, &err),
                     MT_OK);
    assert_int_equal(s.elastic_min_batch, 0);
    assert_int_equal(s.elastic_max_batch, 0);
    assert_int_equal(check(", \"mesh\": {\"data\": 2}, \"elastic\": {}", &s, &err), MT_OK);
    assert_int_equal(s.elastic_max_batch, 0);
}

static const struct {
    const char *extra; /* spliced into the valid spec */
    mt_code code;
    const char *path; /* the message starts with it */
} bad[] = {
    {", \"foo\": 1", MT_INVALID_ARGUMENT, "foo: unknown field"},
    {", \"seed\": -1", MT_INVALID_ARGUMENT, "seed"},
    {", \"optimizer\": {\"name\": \"adam\", \"momentum\": 0.9}", MT_INVALID_ARGUMENT,
     "optimizer.momentum"},
    {", \"dataset\": {\"format\": \"idx\", \"train_images\": 3}", MT_INVALID_ARGUMENT,
     "dataset.train_images"},
    {", \"dataset\": {\"train_images\": \"/nonexistent/x.gz\"}", MT_NOT_FOUND,
     "dataset.train_images"},
    {", \"mesh\": {\"batch\": 0}", MT_INVALID_ARGUMENT, "mesh.batch"},
    {", \"mesh\": {}", MT_INVALID_ARGUMENT, "mesh"},
    {", \"mesh\": {\"batch\": 2, \"model\": 5},"
     " \"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"]}",
     MT_INVALID_ARGUMENT, "layouts[\"dense_1\\\\.kernel\"][1]"},
    {", \"mesh\": {\"batch\": 2}, \"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", "
     "\"model\"]}",
     MT_INVALID_ARGUMENT, "layouts[\"dense_1\\\\.kernel\"][1]: mesh has no dimension 'model'"},
    {", \"mesh\": {\"batch\": 2}, \"layouts\": {\"dense_.*\": [\"unsharded\", \"batch\"]}",
     MT_INVALID_ARGUMENT, "layouts[\"dense_.*\"]"},
    {", \"mesh\": {\"batch\": 3}, \"input_layout\": [\"batch\", \"unsharded\"]",
     MT_INVALID_ARGUMENT, "input_layout[0]"},
    {", \"checkpoint\": {\"every_steps\": 0}", MT_INVALID_ARGUMENT, "checkpoint.every_steps"},
    {", \"checkpoint\": {\"keep\": 2.5}", MT_INVALID_ARGUMENT, "checkpoint.keep"},
    {", \"checkpoint\": {\"every\": 2}", MT_INVALID_ARGUMENT, "checkpoint.every: unknown field"},
    {", \"checkpoint\": 3", MT_INVALID_ARGUMENT, "checkpoint: must be an object"},
    {", \"restart\": {\"max_restarts\": -1}", MT_INVALID_ARGUMENT, "restart.max_restarts"},
    {", \"elastic\": {\"min_batch\": 4, \"max_batch\": 2}", MT_INVALID_ARGUMENT,
     "elastic.max_batch"},
    {", \"init_from\": \"job-000001\"", MT_INVALID_ARGUMENT, "init_from: must be an object"},
    {", \"init_from\": {\"job\": 3}", MT_INVALID_ARGUMENT, "init_from.job: must be a job id"},
    {", \"init_from\": {\"job\": \"job-000001\", \"step\": 0}", MT_INVALID_ARGUMENT,
     "init_from.step"},
    {", \"init_from\": {\"job\": \"job-000001\", \"at\": 3}", MT_INVALID_ARGUMENT,
     "init_from.at: unknown field"},
    {", \"dataset\": {\"format\": \"csv\", \"train\": \"/tmp/mt-no-such-file-*.csv\"}",
     MT_NOT_FOUND, "dataset.train"},
    {", \"loss\": \"hinge\"", MT_INVALID_ARGUMENT, "loss: unknown loss 'hinge'"},
    {", \"loss\": \"mse\"", MT_INVALID_ARGUMENT,
     "loss: mse needs float targets (\"label_type\": \"float\"); the dataset has class labels"},
    {", \"metrics\": [\"auc\"]", MT_INVALID_ARGUMENT, "metrics[0]: auc needs"},
    {", \"validation\": {\"split\": 0}", MT_INVALID_ARGUMENT, "validation.split"},
};

static void test_jobspec_invalid_specs_name_the_path(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mt_jobspec_summary s;
        mt_err err = MT_ERR_INIT;
        mt_code rc = check(bad[i].extra, &s, &err);
        if (rc != bad[i].code || strncmp(err.msg, bad[i].path, strlen(bad[i].path)) != 0) {
            print_error("case %zu (%s): got %s '%s', want %s '%s...'\n", i, bad[i].extra,
                        mt_code_name(rc), err.msg, mt_code_name(bad[i].code), bad[i].path);
            fail();
        }
        assert_int_equal(s.n_devices, 0); /* zeroed on failure */
    }
}

static void test_jobspec_model_and_syntax_errors(void **state)
{
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    const char *units = "{\"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\","
                        " \"units\": 0}]}}";
    const char *notjson = "{\"model\": ";
    const char *arr = "[1, 2]";
    (void)state;

    assert_int_equal(mt_jobspec_validate(units, strlen(units), &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "model.layers[0].units"));
    assert_int_equal(mt_jobspec_validate(notjson, strlen(notjson), &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "(root): not valid JSON"));
    assert_int_equal(mt_jobspec_validate(arr, strlen(arr), &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "(root)"));
    assert_int_equal(mt_jobspec_validate(NULL, 0, &s, &err), MT_INVALID_ARGUMENT);
    /* a model far beyond the parameter limit is refused before anything is allocated */
    const char *huge = "{\"model\": {\"input_shape\": [28, 28, 1], \"layers\": [{\"type\": "
                       "\"flatten\"}, {\"type\": \"dense\", \"units\": 16777216}, {\"type\": "
                       "\"dense\", \"units\": 10}]}}";
    assert_int_equal(mt_jobspec_validate(huge, strlen(huge), &s, &err), MT_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "model: 13337886730 parameters exceed the limit of 67108864"));
    /* a global batch beyond the batch limit (core/model's mt_model_check_limits) */
    const char *bigbatch = "{\"batch_size\": 100000, \"model\": {\"input_shape\": [4], "
                           "\"layers\": [{\"type\": \"dense\", \"units\": 2}]}}";
    assert_int_equal(mt_jobspec_validate(bigbatch, strlen(bigbatch), &s, &err),
                     MT_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "batch_size: 100000 examples exceeds the limit of 65536"));
    assert_int_equal(mt_jobspec_validate(arr, MT_JOBSPEC_MAX_SIZE + 1u, &s, &err),
                     MT_INVALID_ARGUMENT);
}

/* validate_structure opens no file: a FIFO and a missing file pass it, relative paths need a
 * folder, the layouts are still checked when the input shape is known. */
static void test_jobspec_structure_opens_nothing(void **state)
{
    char dir[] = "/tmp/mt-jobspec-XXXXXX", fifo[64], spec[1024];
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    mt_jobspec_opts o = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_jobspec *js = NULL;
    (void)state;

    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/p", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(spec, sizeof(spec),
             "{\"dataset\": {\"format\": \"idx\", \"train_images\": \"%s\", \"train_labels\": "
             "\"/nonexistent/l\"}, \"model\": {\"layers\": [{\"type\": \"flatten\"}, {\"type\": "
             "\"dense\", \"units\": 10}]}}",
             fifo);
    assert_int_equal(mt_jobspec_validate_structure(spec, strlen(spec), NULL, &s, &err), MT_OK);
    assert_int_equal(s.n_devices, 1);
    assert_int_equal(s.total_steps, 0); /* unknown without the files */
    /* the full check refuses the FIFO before opening it (it would block) */
    assert_int_equal(mt_jobspec_validate(spec, strlen(spec), &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.train_images: "));
    assert_non_null(strstr(err.msg, "is a FIFO, not a regular file"));
    assert_int_equal(mt_jobspec_parse(spec, strlen(spec), &js, &err), MT_OK);
    assert_int_equal(mt_jobspec_check_files(js, NULL, NULL, &err), MT_INVALID_ARGUMENT);
    mt_jobspec_free(js);

    /* relative paths: refused without a folder, accepted with one */
    const char *rel = "{\"dataset\": {\"format\": \"text\", \"train\": [\"data/a.tsv\"]},"
                      " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 2}]}}";
    assert_int_equal(mt_jobspec_validate_structure(rel, strlen(rel), NULL, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.train[0]: relative path 'data/a.tsv'"));
    o.base_dir = "/srv";
    assert_int_equal(mt_jobspec_validate_structure(rel, strlen(rel), &o, &s, &err), MT_OK);
    assert_int_equal(s.input_rank, 1); /* text: max_tokens (default 1200) features */
    assert_int_equal(s.input_shape[0], 1200);

    /* with the input shape known, layouts are checked as mt_jobspec_validate does */
    const char *lay = "{\"dataset\": {\"format\": \"text\", \"train\": \"/d/a.tsv\", "
                      "\"max_tokens\": 30}, \"mesh\": {\"batch\": 1, \"model\": 4},"
                      " \"layouts\": {\"dense\\\\.kernel\": [\"unsharded\", \"model\"]},"
                      " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 6}]}}";
    assert_int_equal(mt_jobspec_validate_structure(lay, strlen(lay), NULL, &s, &err),
                     MT_INVALID_ARGUMENT);
    const char *badtype = "{\"dataset\": {\"format\": \"csv\", \"train\": {\"files\": 3}},"
                          " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 2}]}}";
    assert_int_equal(mt_jobspec_validate_structure(badtype, strlen(badtype), NULL, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.train.files: must be a path"));
    unlink(fifo);
    rmdir(dir);
}

/* mt_jobspec_absolute_paths rewrites every relative path field and nothing else. */
static void test_jobspec_absolute_paths(void **state)
{
    const char *in = "{\"dataset\": {\"format\": \"idx\", \"train\": [{\"images\": \"a/i\", "
                     "\"labels\": \"/abs/l\"}], \"test\": {\"glob\": \"t*.gz\"}}, \"name\": \"x\"}";
    const char *flat = "{\"dataset\": {\"train_images\": \"../i.gz\"}}";
    mt_err err = MT_ERR_INIT;
    char *out = NULL;
    size_t n = 0;
    (void)state;

    assert_int_equal(mt_jobspec_absolute_paths(in, strlen(in), "/spec/dir", &out, &n, &err), MT_OK);
    assert_int_equal(n, strlen(out));
    assert_non_null(strstr(out, "\"images\":\"/spec/dir/a/i\""));
    assert_non_null(strstr(out, "\"labels\":\"/abs/l\""));
    assert_non_null(strstr(out, "\"glob\":\"/spec/dir/t*.gz\""));
    mt_free(out);
    assert_int_equal(mt_jobspec_absolute_paths(flat, strlen(flat), "/s", &out, &n, &err), MT_OK);
    assert_non_null(strstr(out, "\"train_images\":\"/s/../i.gz\""));
    mt_free(out);
    /* nothing relative, or not a spec: the text as it is */
    assert_int_equal(mt_jobspec_absolute_paths("[1", 2, "/s", &out, &n, &err), MT_OK);
    assert_string_equal(out, "[1");
    mt_free(out);
}

/* "restart.collective_deadline_ms": the job's collective deadline, 100 ms .. 1 h. */
/* "reproducibility": the modes, a near miss, the batch dimensions mesh_invariant accepts (batch
 * 100: 4 leaves of 25, so 1, 2, 4 keep the bits), dense kernels split over a model dimension (2
 * keeps the bits; 16 does not divide the 8 leaves of 64 units), global_clipnorm with split
 * weights, and elastic ranges (every replica count they allow that divides the batch must keep
 * the bits); every layer kind runs (layer_norm, a dense layer tied_to an embedding). */
static void test_jobspec_reproducibility(void **state)
{
    static const struct {
        const char *extra;
        mt_code code;
        const char *msg; /* a part of the message */
    } t[] = {
        {", \"reproducibility\": \"fixed_mesh\", \"mesh\": {\"batch\": 5}", MT_OK, ""},
        {", \"reproducibility\": \"mesh_invarient\"", MT_INVALID_ARGUMENT,
         "reproducibility: unknown mode \"mesh_invarient\"; did you mean \"mesh_invariant\"?"},
        {", \"reproducibility\": 1", MT_INVALID_ARGUMENT, "reproducibility: must be a string"},
        {", \"reproducibilty\": \"fixed_mesh\"", MT_INVALID_ARGUMENT,
         "reproducibilty: unknown field; did you mean reproducibility?"},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 5}", MT_INVALID_ARGUMENT,
         "needs the batch dimension's size (5) to be a power of two dividing the 4 leaves of "
         "batch_size 100 (sizes that keep the bits: 1, 2, 4;"},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 10}",
         MT_INVALID_ARGUMENT, "size (10) to be a power of two"},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 4}", MT_OK, ""},
        {", \"reproducibility\": \"mesh_invariant\"", MT_OK, ""},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 2, \"model\": 2}", MT_OK,
         ""},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 2, \"model\": 2}, "
         "\"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"], "
         "\"dense_2\\\\.kernel\": [\"model\", \"unsharded\"]}",
         MT_OK, ""},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 1, \"model\": 16}, "
         "\"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"]}",
         MT_INVALID_ARGUMENT,
         "model.layers[1] (dense_1): reproducibility: \"mesh_invariant\" needs mesh dimension "
         "'model' (size 16), which splits the kernel's axis 1 (64 wide), to be a power of two "
         "dividing its 8 leaves (sizes that keep the bits: 1, 2, 4, 8)"},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 2, \"model\": 2}, "
         "\"optimizer\": {\"name\": \"adam\", \"global_clipnorm\": 1.0}, "
         "\"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"]}",
         MT_OK, ""},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 4}, "
         "\"elastic\": {\"min_batch\": 1, \"max_batch\": 4}",
         MT_OK, ""},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 4}, "
         "\"elastic\": {\"min_batch\": 2, \"max_batch\": 5}",
         MT_INVALID_ARGUMENT,
         "elastic: reproducibility: \"mesh_invariant\" needs every replica count the job may "
         "resume on (those in [2, 5] dividing batch_size 100) to keep the bits; 5 does not (sizes "
         "that keep the bits: 1, 2, 4)"},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 4}, "
         "\"optimizer\": {\"name\": \"adam\", \"global_clipnorm\": 1.0}",
         MT_OK, ""},
        {", \"reproducibility\": \"mesh_invariant\", \"mesh\": {\"batch\": 2, \"model\": 1}", MT_OK,
         ""},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        mt_jobspec_summary s;
        mt_err err = MT_ERR_INIT;
        mt_code rc = check(t[i].extra, &s, &err);
        if (rc != t[i].code || (rc != MT_OK && strstr(err.msg, t[i].msg) == NULL)) {
            print_error("case %zu (%s): got %s '%s', want %s '...%s...'\n", i, t[i].extra,
                        mt_code_name(rc), err.msg, mt_code_name(t[i].code), t[i].msg);
            fail();
        }
        if (rc == MT_OK) /* batch 100: 4 leaves under mesh_invariant, 0 (none) otherwise */
            assert_int_equal(s.repro_leaves, strstr(t[i].extra, "mesh_invariant") ? 4 : 0);
    }
    {
        mt_jobspec_summary s;
        mt_err err = MT_ERR_INIT;
        const char *ln = "{\"batch_size\": 32, \"reproducibility\": \"mesh_invariant\", \"model\": "
                         "{\"input_shape\": [28, 28, 1], \"layers\": [{\"type\": \"flatten\"}, "
                         "{\"type\": \"layer_norm\"}, {\"type\": \"dense\", \"units\": 10}]}}";
        const char *tied = "{\"batch_size\": 32, \"reproducibility\": \"mesh_invariant\", "
                           "\"model\": {\"input_shape\": [1], \"layers\": [{\"type\": "
                           "\"embedding\", \"input_dim\": 10, \"output_dim\": 4, \"name\": "
                           "\"tok\"}, {\"type\": \"dense\", \"units\": 10, \"tied_to\": "
                           "\"tok\", \"name\": \"head\"}]}}";
        assert_int_equal(mt_jobspec_validate(ln, strlen(ln), &s, &err), MT_OK);
        assert_int_equal(mt_jobspec_validate(tied, strlen(tied), &s, &err), MT_OK);
    }
}

static void test_jobspec_collective_deadline(void **state)
{
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    (void)state;

    assert_int_equal(check(", \"restart\": {\"collective_deadline_ms\": 4000}", &s, &err), MT_OK);
    assert_int_equal(s.coll_deadline_ms, 4000);
    assert_int_equal(check("", &s, &err), MT_OK);
    assert_int_equal(s.coll_deadline_ms, 0); /* the worker's default */
    assert_int_equal(check(", \"restart\": {\"collective_deadline_ms\": 50}", &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "restart.collective_deadline_ms: must be an integer in"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobspec_valid_summary),
        cmocka_unit_test(test_jobspec_defaults_and_steps_cap),
        cmocka_unit_test(test_jobspec_elastic_bounds),
        cmocka_unit_test(test_jobspec_invalid_specs_name_the_path),
        cmocka_unit_test(test_jobspec_model_and_syntax_errors),
        cmocka_unit_test(test_jobspec_structure_opens_nothing),
        cmocka_unit_test(test_jobspec_absolute_paths),
        cmocka_unit_test(test_jobspec_collective_deadline),
        cmocka_unit_test(test_jobspec_reproducibility),
    };
    return MT_RUN_TESTS(tests);
}
