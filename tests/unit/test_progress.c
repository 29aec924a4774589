/* SPDX-License-Identifier: MIT */
/*
 * test_progress.c — client/progress.h: the line fits columns - 1 at every width (the bar
 * shrinks, then goes, then the line is cut), the closing line keeps every number, a full bar
 * at no width limit, the arrow head, the in-place redraw on a "terminal" (a temp file with
 * tty forced and a fixed width), the pace of plain lines off a terminal, --log-every parsing,
 * and the terminal width from $COLUMNS when fd is not a terminal.
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>

#include "client/progress.h"

#define HEAD "Epoch 2/3"
#define TAIL " - ETA: 19s - loss: 0.3311 - accuracy: 0.8807"

static void test_progress_full_width(void **state)
{
    char out[256];
    size_t n;

    (void)state;
    n = mt_cli_progress_format(out, sizeof(out), 0, HEAD, 512, 938, TAIL, true);
    assert_string_equal(out, "Epoch 2/3  512/938 [===============>..............]" TAIL);
    assert_int_equal(n, strlen(out));
    mt_cli_progress_format(out, sizeof(out), 0, HEAD, 938, 938, "", false);
    assert_string_equal(out, "Epoch 2/3  938/938 [==============================]");
    mt_cli_progress_format(out, sizeof(out), 0, HEAD, 1, 938, "", false);
    assert_string_equal(out, "Epoch 2/3  1/938 [>.............................]");
    mt_cli_progress_format(out, sizeof(out), 0, HEAD, 0, 0, "", false);
    assert_string_equal(out, "Epoch 2/3  0/0 [..............................]");
}

static void test_progress_fits_every_width(void **state)
{
    char out[256];

    (void)state;
    for (int cols = 1; cols <= 200; cols++) {
        size_t n = mt_cli_progress_format(out, sizeof(out), cols, HEAD, 512, 938, TAIL, true);
        assert_int_equal(n, strlen(out));
        assert_true(n <= (size_t)(cols - 1));
        if (cols >= 120) /* room for the whole bar */
            assert_non_null(strstr(out, "[===============>..............]"));
    }
    /* 80 columns: the bar shrinks to what is left and the numbers stay */
    mt_cli_progress_format(out, sizeof(out), 80, HEAD, 512, 938, TAIL, true);
    assert_int_equal(strlen(out), 79);
    assert_non_null(strstr(out, TAIL));
    assert_memory_equal(out, "Epoch 2/3  512/938 [", 20);
    /* too narrow for a bar of MT_CLI_BAR_MIN: none, then the line is cut */
    mt_cli_progress_format(out, sizeof(out), 70, HEAD, 512, 938, TAIL, true);
    assert_string_equal(out, "Epoch 2/3  512/938" TAIL);
    mt_cli_progress_format(out, sizeof(out), 40, HEAD, 512, 938, TAIL, true);
    assert_string_equal(out, "Epoch 2/3  512/938 - ETA: 19s - loss: 0");
}

static void test_progress_close_keeps_numbers(void **state)
{
    const char *tail = " - 41s - loss: 0.3102 - accuracy: 0.8881 - eval_loss: 0.3285 - "
                       "eval_accuracy: 0.8825";
    char out[256];

    (void)state;
    mt_cli_progress_format(out, sizeof(out), 80, HEAD, 938, 938, tail, false);
    assert_string_equal(out, "Epoch 2/3  938/938 - 41s - loss: 0.3102 - accuracy: 0.8881 - "
                             "eval_loss: 0.3285 - eval_accuracy: 0.8825");
    mt_cli_progress_format(out, sizeof(out), 160, HEAD, 938, 938, tail, false);
    assert_non_null(strstr(out, "[==============================]"));
}

/* What p wrote to its file since the start. */
static void slurp(mt_cli_progress *p, char *out, size_t cap)
{
    size_t n;

    fflush(p->out);
    rewind(p->out);
    n = fread(out, 1, cap - 1, p->out);
    out[n] = '\0';
}

static void test_progress_terminal_redraw(void **state)
{
    mt_cli_progress p;
    char buf[1024];
    FILE *f = tmpfile();

    (void)state;
    assert_non_null(f);
    mt_cli_progress_init(&p, f, -1, 0);
    assert_false(p.tty);
    p.tty = true; /* as on a terminal of 60 columns */
    p.columns = 60;
    mt_cli_progress_draw(&p, HEAD, 10, 100, " - loss: 1.0000");
    assert_true(p.open);
    mt_cli_progress_draw(&p, HEAD, 20, 100, " - loss: 0.5000");
    assert_false(mt_cli_progress_due(&p, 1000000)); /* never on a terminal */
    mt_cli_progress_close(&p, HEAD, 100, 100, " - 3s - loss: 0.2500", 5);
    assert_false(p.open);
    slurp(&p, buf, sizeof(buf));
    assert_string_equal(buf,
                        "\rEpoch 2/3  10/100 [=>......................] - loss: 1.0000\033[K"
                        "\rEpoch 2/3  20/100 [===>....................] - loss: 0.5000\033[K"
                        "\rEpoch 2/3  100/100 [==================] - 3s - loss: 0.2500\033[K\n");
    /* every line between the \r's is at most 59 columns */
    for (char *s = strtok(buf, "\r\n"); s != NULL; s = strtok(NULL, "\r\n")) {
        char *esc = strstr(s, "\033[K");
        assert_true((size_t)(esc ? esc - s : (long)strlen(s)) <= 59);
    }
    mt_cli_progress_draw(&p, HEAD, 1, 2, "");
    mt_cli_progress_end_line(&p);
    assert_false(p.open);
    fclose(f);
}

static void test_progress_plain_pace(void **state)
{
    mt_cli_progress p;
    char buf[512];
    FILE *f = tmpfile();

    (void)state;
    assert_non_null(f);
    mt_cli_progress_init(&p, f, 30000, 1000);
    assert_false(p.tty);
    mt_cli_progress_draw(&p, HEAD, 1, 2, ""); /* nothing off a terminal */
    assert_false(mt_cli_progress_due(&p, 1000));
    assert_false(mt_cli_progress_due(&p, 30999));
    assert_true(mt_cli_progress_due(&p, 31000));
    assert_false(mt_cli_progress_due(&p, 31001)); /* counted as printed at 31000 */
    mt_cli_progress_close(&p, HEAD, 2, 2, " - 1s", 50000);
    assert_false(mt_cli_progress_due(&p, 79999)); /* the epoch line counts too */
    assert_true(mt_cli_progress_due(&p, 80000));
    mt_cli_progress_mark(&p, 90000);
    assert_false(mt_cli_progress_due(&p, 119999));
    slurp(&p, buf, sizeof(buf));
    assert_string_equal(buf, "Epoch 2/3  2/2 [==============================] - 1s\n");
    mt_cli_progress_end_line(&p); /* no-op off a terminal */
    fclose(f);

    mt_cli_progress_init(&p, stdout, 0, 5); /* --log-every 0: every update */
    p.tty = false;
    assert_true(mt_cli_progress_due(&p, 5));
    assert_true(mt_cli_progress_due(&p, 5));
    mt_cli_progress_init(&p, stdout, -1, 0);
    assert_int_equal(p.every_ms, MT_CLI_LOG_EVERY_DEFAULT_MS);
}

static void test_progress_parse_log_every(void **state)
{
    int64_t ms = -7;

    (void)state;
    assert_true(mt_cli_parse_log_every("30", &ms));
    assert_int_equal(ms, 30000);
    assert_true(mt_cli_parse_log_every("0.25", &ms));
    assert_int_equal(ms, 250);
    assert_true(mt_cli_parse_log_every("0", &ms));
    assert_int_equal(ms, 0);
    ms = -7;
    assert_false(mt_cli_parse_log_every("", &ms));
    assert_false(mt_cli_parse_log_every("-1", &ms));
    assert_false(mt_cli_parse_log_every("5s", &ms));
    assert_false(mt_cli_parse_log_every("nan", &ms));
    assert_false(mt_cli_parse_log_every("inf", &ms));
    assert_int_equal(ms, -7);
}

static void test_progress_columns_env(void **state)
{
    FILE *f = tmpfile();

    (void)state;
    assert_non_null(f);
    setenv("COLUMNS", "132", 1);
    assert_int_equal(mt_cli_term_columns(fileno(f)), 132);
    setenv("COLUMNS", "wide", 1);
    assert_int_equal(mt_cli_term_columns(fileno(f)), 80);
    unsetenv("COLUMNS");
    assert_int_equal(mt_cli_term_columns(fileno(f)), 80);
    fclose(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_full_width),
        cmocka_unit_test(test_progress_fits_every_width),
        cmocka_unit_test(test_progress_close_keeps_numbers),
        cmocka_unit_test(test_progress_terminal_redraw),
        cmocka_unit_test(test_progress_plain_pace),
        cmocka_unit_test(test_progress_parse_log_every),
        cmocka_unit_test(test_progress_columns_env),
    };
    return MT_RUN_TESTS(tests);
}
