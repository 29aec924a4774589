/* SPDX-License-Identifier: MIT */
/* cmd_workers.c — `meshtrain workers`; filled in by the foundation issue (#2). */
#include "client/cli.h"

#include <stdio.h>

int cmd_workers(const mt_cli_global *g, int argc, char **argv)
{
    (void)g;
    (void)argc;
    (void)argv;
    fprintf(stderr, "meshtrain workers: not available in this build yet\n");
    return MT_EXIT_FAILED;
}
