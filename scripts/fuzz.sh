#!/usr/bin/env bash
# `make fuzz`: builds each libFuzzer target in tests/fuzz/ with clang
# (ASan + UBSan) and runs it for FUZZ_TIME seconds (default 60) from its seed
# corpus in tests/fuzz/corpus/TARGET. New inputs go to build/fuzz/corpus-TARGET
# (not committed); crashes to build/fuzz/. Usage: scripts/fuzz.sh [TARGET...]
set -eu
cd "$(dirname "$0")/.."
FUZZ_TIME=${FUZZ_TIME:-60}
FUZZ_CC=${FUZZ_CC:-clang}
out=build/fuzz
gen=build/rel/gen
mkdir -p "$out"
command -v "$FUZZ_CC" >/dev/null || { echo "fuzz: $FUZZ_CC not found (apt-get install clang)" >&2; exit 1; }
[ -f "$gen/parser.c" ] || make -s "$gen/parser.c" "$gen/lexer.c"
# The cuda backend needs no CUDA header and links no CUDA library (loader.h).
cuda=(-DDPC_HAVE_CUDA)
# The image decoders are fuzzed when the build has them (build/config.mk).
images=()
grep -q '^HAVE_IMAGE := 1' build/config.mk 2>/dev/null && images=(-DDPC_HAVE_IMAGE -ljpeg -lpng)
srcs=$(find base frontend ir format passes codegen runtime -name "*.c" | sort)
targets=${*:-$(ls tests/fuzz/fuzz_*.c | sed 's|tests/fuzz/fuzz_||; s|\.c$||')}
status=0
for t in $targets; do
    bin="$out/fuzz_$t"
    echo "fuzz: building $t"
    "$FUZZ_CC" -std=c11 -g -O1 -D_GNU_SOURCE -I. -I"$gen" -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined -Wno-unused-command-line-argument "${cuda[@]:0:3}" "${images[@]:0:1}" \
        -o "$bin" "tests/fuzz/fuzz_$t.c" $srcs "$gen/parser.c" "$gen/lexer.c" \
        -lopenblas -lm -ldl -lpthread "${cuda[@]:3}" "${images[@]:1}"
    mkdir -p "$out/corpus-$t"
    echo "fuzz: running $t for ${FUZZ_TIME}s"
    # The full log stays in build/fuzz/TARGET.log; the summary shows
    # executions, coverage (cov/ft) of the last status line and corpus size.
    (cd "$out" && "./fuzz_$t" -max_total_time="$FUZZ_TIME" -close_fd_mask=2 -print_final_stats=1 \
        -timeout=10 -rss_limit_mb=4096 "corpus-$t" "../../tests/fuzz/corpus/$t" >"$t.log" 2>&1) || true
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|==|SUMMARY|artifact)' "$out/$t.log" || true
    grep -E '^#[0-9]+' "$out/$t.log" | tail -n 1 | sed "s/^/fuzz: $t last status: /"
    echo "fuzz: $t corpus: $(ls "$out/corpus-$t" | wc -l) new inputs, $(ls "tests/fuzz/corpus/$t" | wc -l) seeds"
    if ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* >/dev/null 2>&1; then
        echo "fuzz: $t found problems: $(ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* 2>/dev/null | tr '\n' ' ')"
        status=1
    fi
done
exit $status
