#!/usr/bin/env bash
# run: tier=test san=no
# The input pipeline under ThreadSanitizer: tests/unit/test_pipeline.c
# against the instrumented library (tests/tsan.sh); fails on any race
# report. Prints `N passed, N failed` (the unit test's own line).
. tests/tsan.sh tsan_test
tsan_run test_pipeline
tsan_finish
