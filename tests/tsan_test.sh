#!/usr/bin/env bash
# The input pipeline under ThreadSanitizer: builds tests/unit/test_pipeline.c
# with its only dependencies (runtime/data/{pipeline,cifar,rng}.c) and
# -fsanitize=thread, runs it, and fails on any race report. Uses clang, else
# gcc; when neither can build a TSan binary it says so and counts nothing.
# Prints `N passed, N failed` (the unit test's own line).
. tests/tsan.sh tsan_test
tsan_build test_pipeline_tsan tests/unit/test_pipeline.c runtime/data/pipeline.c runtime/data/cifar.c runtime/data/rng.c ir/err.c ir/file.c -lm
tsan_run test_pipeline_tsan
tsan_finish
