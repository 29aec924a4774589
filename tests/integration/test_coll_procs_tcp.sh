#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_coll_procs_tcp.sh — test_coll_procs.sh with shared memory off: the same checks over the
# direct socket transport (tcp:// and ipc://, driven), which processes of one host no longer
# use by themselves.
COLL_SHM=off exec "$(dirname "$0")/test_coll_procs.sh" "$@"
