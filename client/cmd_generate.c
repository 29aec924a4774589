/* SPDX-License-Identifier: MIT */
/*
 * cmd_generate.c — `meshtrain generate MODEL.safetensors --spec JOB.json --prompt TEXT
 * --tokens N [--temperature T] [--top-k K] [--seed S]`: sample text from an exported language
 * model.
 *
 * The model is rebuilt from the job spec on one device (core/model, as predict does) and its
 * parameters are read from the export (model_io.c). The spec's dataset must be a "tokens"
 * dataset: its block_size T is the model's input, and its tokenizer encodes the prompt and
 * decodes the result. The tokenizer is the export's "meshtrain.tokenizer" metadata (a
 * vocabulary file, core/text; the trainer stores it in every checkpoint as the text tensor
 * meta/meshtrain.tokenizer and export copies it) when present, else it is refitted on the spec's
 * training files (deterministic, so it is the training vocabulary; a note says so on stderr). The
 * loop is core/text's mt_text_generate: the last T tokens are the model's input, the logits of the
 * last real position give the next token (softmax with temperature, top-k, greedy at 0; draws
 * keyed by --seed and the position, so a seed repeats its text). A model whose output has T
 * rows of V logits is read at the row of the last real token, the input right-padded with id 0
 * (a causal model never looks at later positions); a model with one row of V logits predicts
 * the token after its whole input, which is then left-padded with id 0.
 * Prints the prompt and the generated text. Exit codes (cli.h): 0 ok, 2 usage, 4 bad input.
 * Tests: tests/integration/test_generate.sh.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "client/cli.h"
#include "client/jobs_util.h"
#include "client/model_io.h"
#include "data/mt_data.h"
#include "model/mt_model.h"
#include "text/mt_text.h"

#define GENERATE_MAX_TOKENS 100000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: meshtrain generate MODEL.safetensors --spec JOB.json --prompt TEXT --tokens N\n"
            "                          [--temperature T] [--top-k K] [--seed S]\n\n"
            "Sample N tokens from an exported language model (a spec with a \"tokens\" dataset)\n"
            "after the prompt and print the text.\n\n"
            "  --spec F          the job spec the model was trained with\n"
            "  --prompt TEXT     the text to continue (at least one token)\n"
            "  --tokens N        tokens to generate (0..100000)\n"
            "  --temperature T   softmax temperature (default 1; 0 = greedy)\n"
            "  --top-k K         sample among the K most likely tokens only (default: all)\n"
            "  --seed S          the draws' seed (default 0): the same seed, the same text\n");
}

typedef struct generate_args {
    const char *model, *spec, *prompt;
    long tokens, top_k;
    double temperature;
    unsigned long long seed;
} generate_args;

/* The model as mt_text_generate sees it. */
typedef struct lm {
    mt_model *m;
    size_t block, vocab, rows; /* T, V, output rows per example (T or 1) */
    float *x;                  /* (T) the input ids */
} lm;

static mt_code lm_logits(void *ctx, const uint32_t *ids, size_t n, const float **logits,
                         mt_err *err)
{
    lm *l = ctx;
    size_t pad = l->rows == 1 ? l->block - n : 0; /* one row: left-pad; T rows: right-pad */
    const float *out = NULL;
    mt_code rc;

    for (size_t i = 0; i < l->block; i++)
        l->x[i] = 0.0f;
    for (size_t i = 0; i < n; i++)
        l->x[pad + i] = (float)ids[i];
    rc = mt_model_forward(l->m, l->x, 1, 1, false, 0, 0, NULL, &out, err);
    if (rc != MT_OK)
        return rc;
    *logits = out + (l->rows == 1 ? 0 : (n - 1) * l->vocab);
    return MT_OK;
}

/* The tokenizer: the export's vocabulary, else refitted on the spec's training files. */
static mt_code tokenizer(const cJSON *md, const char *model, const mt_data_spec *ds,
                         mt_text_tokenizer **out, mt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, "meshtrain.tokenizer");
    char name[1100];

    if (cJSON_IsString(v)) {
        snprintf(name, sizeof(name), "%s (metadata meshtrain.tokenizer)", model);
        return mt_text_tokenizer_load(name, v->valuestring, strlen(v->valuestring), out, err);
    }
    fprintf(stderr,
            "meshtrain generate: the export carries no vocabulary; refitting the %s "
            "tokenizer on the spec's training files (deterministic: the training "
            "vocabulary)\n",
            mt_text_tokenizer_type_name(ds->tokenizer));
    return mt_data_tokenizer_fit_spec(ds, out, err);
}

/* The spec's dataset section, which must be a tokens dataset. */
static mt_code tokens_spec(const char *path, mt_data_spec **out, mt_err *err)
{
    char *text = NULL, base[4096];
    size_t len = 0;
    cJSON *root;
    mt_code rc = mt_job_spec_read(path, 1 << 24, &text, &len, err);

    *out = NULL;
    if (rc != MT_OK)
        return rc;
    root = cJSON_ParseWithLength(text, len);
    mt_free(text);
    mt_cli_spec_dir(path, base, sizeof(base));
    rc = root == NULL ? mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not JSON", path)
                      : mt_data_spec_parse(cJSON_GetObjectItemCaseSensitive(root, "dataset"),
                                           "dataset", base, out, err);
    cJSON_Delete(root);
    if (rc == MT_OK && (*out)->format != MT_DATA_FORMAT_TOKENS) {
        mt_data_spec_free(*out);
        *out = NULL;
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s: generate needs a language model: dataset.format \"tokens\"", path);
    }
    return rc;
}

/* The model's output rows per example: T (a row per position) or 1 (the next token only), each
 * of V logits (core/model's (rows, c) output view). */
static mt_code output_rows(const lm *l, const char *spec, size_t *rows, mt_err *err)
{
    mt_loss_shape sh = mt_model_output_shape(l->m);

    if (sh.c == l->vocab && (sh.rows == l->block || sh.rows == 1)) {
        *rows = sh.rows;
        return MT_OK;
    }
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "%s: the model outputs %zu×%zu logits per example; generate needs %zu×%zu "
                      "(block_size × vocabulary) or 1×%zu",
                      spec, sh.rows, sh.c, l->block, l->vocab, l->vocab);
}

static int run(const generate_args *a)
{
    mt_err err = MT_ERR_INIT;
    mt_job_spec *spec = NULL;
    mt_data_spec *ds = NULL;
    mt_text_tokenizer *tok = NULL;
    cJSON *md = NULL;
    uint32_t *prompt = NULL, *seq = NULL;
    size_t n_prompt = 0, n_seq = 0, text_len = 0, in_shape[3] = {0, 0, 0};
    char *text = NULL;
    mt_text_sample_opts o = MT_TEXT_SAMPLE_OPTS_DEFAULTS;
    lm l = {NULL, 0, 0, 0, NULL};
    mt_code rc = mt_job_spec_load(a->spec, &spec, &err);

    if (rc == MT_OK)
        rc = tokens_spec(a->spec, &ds, &err);
    if (rc != MT_OK)
        goto done;
    l.block = in_shape[0] = ds->block_size;
    if (spec->input_rank != 0 && (spec->input_rank != 1 || spec->input_shape[0] != l.block)) {
        rc = mt_err_set(&err, MT_INVALID_ARGUMENT,
                        "%s: model.input_shape must be [%zu] (dataset.block_size)", a->spec,
                        l.block);
        goto done;
    }
    if ((rc = mt_model_new(spec, 1, in_shape, 1, &l.m, &err)) != MT_OK ||
        (rc = mt_cli_model_load(l.m, a->model, &md, &err)) != MT_OK ||
        (rc = tokenizer(md, a->model, ds, &tok, &err)) != MT_OK)
        goto done;
    l.vocab = mt_text_tokenizer_vocab_size(tok);
    if ((rc = output_rows(&l, a->spec, &l.rows, &err)) != MT_OK)
        goto done;
    if ((l.x = mt_malloc(l.block * sizeof(float))) == NULL) {
        rc = mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "generate: out of memory");
        goto done;
    }
    rc = mt_text_tokenizer_encode(tok, a->prompt, strlen(a->prompt), &prompt, &n_prompt, &err);
    if (rc == MT_OK && n_prompt == 0)
        rc = mt_err_set(&err, MT_INVALID_ARGUMENT, "--prompt: the text has no tokens");
    if (rc != MT_OK)
        goto done;
    o.temperature = (float)a->temperature;
    o.top_k = (size_t)a->top_k;
    o.seed = (uint64_t)a->seed;
    rc = mt_text_generate(prompt, n_prompt, (size_t)a->tokens, l.block, l.vocab, &o, lm_logits, &l,
                          &seq, &n_seq, &err);
    if (rc == MT_OK)
        rc = mt_text_tokenizer_decode(tok, seq, n_seq, &text, &text_len, &err);
    if (rc == MT_OK) {
        fwrite(text, 1, text_len, stdout);
        fputc('\n', stdout);
    }
done:
    mt_free(text);
    mt_free(seq);
    mt_free(prompt);
    mt_free(l.x);
    cJSON_Delete(md);
    mt_text_tokenizer_free(tok);
    mt_model_free(l.m);
    mt_data_spec_free(ds);
    mt_job_spec_free(spec);
    return rc == MT_OK ? MT_EXIT_OK : mt_cli_fail(&err);
}

int cmd_generate(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"spec", required_argument, NULL, 's'},   {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 'n'}, {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},  {"seed", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    generate_args a;
    char *end;
    int c;

    (void)g;
    memset(&a, 0, sizeof(a));
    a.tokens = -1;
    a.temperature = 1.0;
    optind = 0; /* glibc: full re-initialisation, so options after MODEL are permuted too */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            a.spec = optarg;
            break;
        case 'p':
            a.prompt = optarg;
            break;
        case 'n':
        case 'k': {
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < 0 || v > GENERATE_MAX_TOKENS)
                return mt_cli_usage_error("generate", "--%s '%s': expected a count (0..%d)",
                                          c == 'n' ? "tokens" : "top-k", optarg,
                                          GENERATE_MAX_TOKENS);
            *(c == 'n' ? &a.tokens : &a.top_k) = v;
            break;
        }
        case 't':
            a.temperature = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(a.temperature >= 0.0) ||
                !isfinite(a.temperature) || a.temperature > 1e6)
                return mt_cli_usage_error("generate", "--temperature '%s': expected a number >= 0",
                                          optarg);
            break;
        case 'S':
            a.seed = strtoull(optarg, &end, 10);
            if (end == optarg || *end != '\0' || optarg[0] == '-')
                return mt_cli_usage_error("generate", "--seed '%s': expected a whole number",
                                          optarg);
            break;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("generate", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("generate", "expected one MODEL.safetensors argument");
    if (a.spec == NULL || a.prompt == NULL || a.tokens < 0)
        return mt_cli_usage_error("generate", "--spec, --prompt and --tokens are required");
    a.model = argv[optind];
    return run(&a);
}
