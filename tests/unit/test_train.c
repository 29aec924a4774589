/* SPDX-License-Identifier: MIT */
/*
 * test_train.c — unit tests for core/train (mt_train.h) on small generated data sets: learning a
 * separable problem, epoch/step accounting and overrides, progress events, cancellation by the
 * callback, determinism of a run, and refusals when the spec does not fit the data.
 */
#include "mt_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/mt_train.h"

/* n examples of 4x4x1: class k has a bright 2x2 quadrant k (plus noise). */
static void make_set(mt_idx_set *s, size_t n, uint32_t seed)
{
    memset(s, 0, sizeof(*s));
    s->n = n, s->h = 4, s->w = 4, s->c = 1;
    s->images = malloc(n * 16 * sizeof(float));
    s->labels = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        int k = (int)((i * 7 + seed) % 4);
        s->labels[i] = k;
        for (int p = 0; p < 16; p++) {
            int r = p / 4, c = p % 4, q = (r / 2) * 2 + c / 2;
            seed = seed * 1103515245u + 12345u;
            s->images[i * 16 + p] = (q == k ? 0.8f : 0.1f) + (float)((seed >> 16) % 100) * 1e-3f;
        }
    }
}

static void free_set(mt_idx_set *s)
{
    free(s->images);
    free(s->labels);
}

static mt_job_spec *spec_of(const char *js)
{
    mt_job_spec *s = NULL;
    assert_int_equal(mt_job_spec_parse(js, strlen(js), &s, NULL), MT_OK);
    return s;
}

#define MLP                                                                                        \
    "\"model\":{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":16,"              \
    "\"activation\":\"relu\"},{\"type\":\"dense\",\"units\":4}]}"

typedef struct events {
    int steps, epochs;
    int64_t last_epoch_steps;
    int cancel_at; /* cancel at this step (0: never) */
} events;

static mt_code on_progress(void *ctx, const mt_train_progress *p)
{
    events *e = ctx;
    if (p->event == MT_TRAIN_STEP) {
        e->steps++;
        assert_true(p->loss > 0 && p->accuracy >= 0 && p->accuracy <= 1);
        assert_true(p->examples_per_sec > 0);
        if (e->cancel_at && p->step == e->cancel_at)
            return MT_CANCELLED;
    } else {
        e->epochs++;
        e->last_epoch_steps = p->epoch_step;
    }
    return MT_OK;
}

static void test_train_learns_and_counts(void **state)
{
    mt_idx_set tr, te;
    mt_job_spec *s = spec_of("{\"batch_size\":10,\"epochs\":4,\"learning_rate\":0.01," MLP "}");
    mt_train_options o = MT_TRAIN_OPTIONS_DEFAULTS;
    mt_train_result r;
    events e = {0, 0, 0, 0};
    mt_err err = MT_ERR_INIT;
    (void)state;
    make_set(&tr, 95, 1);
    make_set(&te, 40, 2);
    assert_int_equal(mt_train_run_data(s, &o, &tr, &te, on_progress, &e, &r, &err), MT_OK);
    assert_int_equal(r.epochs, 4);
    assert_int_equal(r.steps, 40); /* ceil(95/10) = 10 per epoch, last batch of 5 */
    assert_int_equal(e.steps, 40);
    assert_int_equal(e.epochs, 4);
    assert_true(r.test_accuracy >= 0.95);
    assert_true(r.test_loss < 0.5);
    assert_true(r.examples_per_sec > 0);

    /* --steps alone: as many epochs as needed, the last one partial */
    o.steps = 13;
    memset(&e, 0, sizeof(e));
    assert_int_equal(mt_train_run_data(s, &o, &tr, &te, on_progress, &e, &r, &err), MT_OK);
    assert_int_equal(r.steps, 13);
    assert_int_equal(r.epochs, 2);
    assert_int_equal(e.last_epoch_steps, 3);
    /* --epochs and --steps: whichever ends first */
    o.epochs = 1;
    assert_int_equal(mt_train_run_data(s, &o, &tr, &te, NULL, NULL, &r, &err), MT_OK);
    assert_int_equal(r.steps, 10);
    free_set(&tr);
    free_set(&te);
    mt_job_spec_free(s);
}

static void test_train_deterministic(void **state)
{
    mt_idx_set tr, te;
    mt_job_spec *s = spec_of("{\"batch_size\":8,\"steps\":20,\"seed\":5," MLP "}");
    mt_train_options o = MT_TRAIN_OPTIONS_DEFAULTS;
    mt_train_result a, b;
    (void)state;
    make_set(&tr, 64, 3);
    make_set(&te, 16, 4);
    assert_int_equal(mt_train_run_data(s, &o, &tr, &te, NULL, NULL, &a, NULL), MT_OK);
    assert_int_equal(mt_train_run_data(s, &o, &tr, &te, NULL, NULL, &b, NULL), MT_OK);
    assert_true(a.test_loss == b.test_loss); /* bit-identical */
    s->seed = 6;
    assert_int_equal(mt_train_run_data(s, &o, &tr, &te, NULL, NULL, &b, NULL), MT_OK);
    assert_true(a.test_loss != b.test_loss);
    free_set(&tr);
    free_set(&te);
    mt_job_spec_free(s);
}

/* Validation events: which steps were evaluated, where the run stopped. */
typedef struct val_events {
    int evaluated[16], n;
    bool stopping;
} val_events;

static mt_code on_val(void *ctx, const mt_train_progress *p)
{
    val_events *v = ctx;
    if (p->event == MT_TRAIN_STEP && p->has_val && v->n < 16) {
        assert_true(p->val.mask & (1u << MT_METRIC_ACCURACY));
        assert_true(p->val.loss > 0);
        v->evaluated[v->n++] = (int)p->step;
    }
    v->stopping = v->stopping || p->stopping;
    return MT_OK;
}

/* "validation": the last 20% held out (Keras's validation_split), an evaluation every 3 steps,
 * early stopping with a min_delta nothing beats (the second evaluation stops the run), the best
 * step; without early stopping every evaluation of a run that learns is a new best. */
static void test_train_validation_schedule_and_stopping(void **state)
{
    mt_idx_set tr, te;
    mt_job_spec *s =
        spec_of("{\"batch_size\":8,\"epochs\":5,\"learning_rate\":0.01,"
                "\"validation\":{\"split\":0.2,\"every_steps\":3,\"early_stopping\":"
                "{\"min_delta\":1e9},\"best\":{\"monitor\":\"val_accuracy\"}}," MLP "}");
    mt_train_result r;
    val_events v;
    mt_err err = MT_ERR_INIT;
    (void)state;
    make_set(&tr, 80, 1); /* 64 train (8 steps per epoch), 16 held out */
    make_set(&te, 16, 2);
    memset(&v, 0, sizeof(v));
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &te, on_val, &v, &r, &err), MT_OK);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.evaluated[0], 3);
    assert_int_equal(v.evaluated[1], 6);
    assert_true(v.stopping && r.stopped_early);
    assert_int_equal(r.steps, 6);
    assert_true(r.has_val && r.has_test);
    assert_true(r.best_step == 3 || r.best_step == 6);
    /* without early stopping: 40 steps, an evaluation every 3 */
    s->validation.early_stopping = false;
    memset(&v, 0, sizeof(v));
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &te, on_val, &v, &r, &err), MT_OK);
    assert_int_equal(r.steps, 40);
    assert_int_equal(v.n, 13);
    assert_false(r.stopped_early);
    /* a split that leaves nothing to train on */
    s->validation.split = 0.999;
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &te, NULL, NULL, &r, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "validation.split"));
    free_set(&tr);
    free_set(&te);
    mt_job_spec_free(s);
}

/* The validation bookkeeping a checkpoint carries (mt_train_val_text) continues a run with the
 * same monitors; a part for another monitor is left as new (a run started from another job's
 * checkpoint). */
static void test_train_val_text_round_trip(void **state)
{
    mt_job_spec *s = spec_of("{\"batch_size\":8,\"validation\":{\"split\":0.2,\"early_stopping\":"
                             "{\"patience\":2},\"best\":{\"monitor\":\"val_accuracy\"}}," MLP "}");
    mt_job_spec *o = spec_of("{\"batch_size\":8,\"validation\":{\"split\":0.2,\"early_stopping\":"
                             "{\"patience\":2},\"best\":{\"monitor\":\"val_loss\"}}," MLP "}");
    mt_train_val_state a, b, c;
    char text[MT_TRAIN_VAL_TEXT];
    (void)state;
    mt_train_val_init(&a, &s->validation);
    mt_train_val_text(&a, text, sizeof(text));
    assert_non_null(strstr(text, "\"best\":null,\"best_step\":0"));
    a.best_best = 0.8125, a.best_step = 12, a.stop_best = 0.43210987654321, a.wait = 1;
    mt_train_val_text(&a, text, sizeof(text));
    mt_train_val_init(&b, &s->validation);
    assert_true(mt_train_val_restore(&b, text));
    assert_true(b.best_best == a.best_best && b.best_step == 12);
    assert_true(b.stop_best == a.stop_best && b.wait == 1);
    mt_train_val_init(&c, &o->validation);
    assert_true(mt_train_val_restore(&c, text));
    assert_true(isnan(c.best_best) && c.best_step == 0);
    assert_true(c.stop_best == a.stop_best && c.wait == 1);
    mt_train_val_init(&b, &s->validation);
    assert_false(mt_train_val_restore(&b, "not json"));
    assert_false(mt_train_val_restore(&b, ""));
    assert_true(isnan(b.best_best) && b.wait == 0);
    mt_job_spec_free(s);
    mt_job_spec_free(o);
}

static void test_train_cancel_and_refusals(void **state)
{
    mt_idx_set tr, te, odd;
    mt_job_spec *s = spec_of("{\"batch_size\":8,\"epochs\":2," MLP "}");
    mt_train_result r;
    events e = {0, 0, 0, 5};
    mt_err err = MT_ERR_INIT;
    (void)state;
    make_set(&tr, 64, 3);
    make_set(&te, 16, 4);
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &te, on_progress, &e, &r, &err), MT_CANCELLED);
    assert_int_equal(e.steps, 5);
    assert_non_null(strstr(err.msg, "step 5"));
    /* test images of another shape */
    make_set(&odd, 4, 1);
    odd.h = 2, odd.w = 8;
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &odd, NULL, NULL, &r, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "differ"));
    /* a label the model cannot output */
    tr.labels[3] = 7;
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &te, NULL, NULL, &r, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "label 7"));
    /* an empty training set */
    tr.n = 0;
    assert_int_equal(mt_train_run_data(s, NULL, &tr, &te, NULL, NULL, &r, &err),
                     MT_INVALID_ARGUMENT);
    free_set(&tr);
    free_set(&te);
    free_set(&odd);
    mt_job_spec_free(s);
    /* the data loader's errors come through mt_train_run */
    s = spec_of("{\"dataset\":{\"train_images\":\"/nonexistent/x.gz\"}," MLP "}");
    assert_int_equal(mt_train_run(s, NULL, NULL, NULL, &r, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gz"));
    mt_job_spec_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_learns_and_counts),
        cmocka_unit_test(test_train_deterministic),
        cmocka_unit_test(test_train_validation_schedule_and_stopping),
        cmocka_unit_test(test_train_val_text_round_trip),
        cmocka_unit_test(test_train_cancel_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
