/* SPDX-License-Identifier: MIT */
/* cmd_train.c — `meshtrain train --local`; filled in by the training engine issue (#3). */
#include "client/cli.h"

#include <stdio.h>

int cmd_train(const mt_cli_global *g, int argc, char **argv)
{
    (void)g;
    (void)argc;
    (void)argv;
    fprintf(stderr, "meshtrain train: not available in this build yet\n");
    return MT_EXIT_FAILED;
}
