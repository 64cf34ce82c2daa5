#!/usr/bin/env bash
# run: tier=test san=no
# The collectives and the data-parallel replicas under ThreadSanitizer:
# tests/unit/test_collective.c (barriers, the communication queues' threads)
# and tests/unit/test_replicas.c (replica threads, communication threads and
# executors together), against the instrumented library (tests/tsan.sh);
# fails on any race report. Prints `N passed, N failed`.
. tests/tsan.sh coll_tsan_test
tsan_run test_collective
tsan_run test_replicas
tsan_finish
