/* SPDX-License-Identifier: MIT */
/* main.c — placeholder until the foundation issue (#2) lands. */
#include <stdio.h>

int main(void)
{
    fputs("meshtrain: not built yet\n", stderr);
    return 1;
}
