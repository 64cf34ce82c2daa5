#!/usr/bin/env bash
# Compile time against network length: dpc on relu chains of
# 8,000 to 100,000 graph nodes (the frontend's most) and on a chain of
# 24,998 dense layers (100,000 nodes, 49,996 parameters), then dprun
# loading the 100,000-node relu plan and training one step. Prints each
# time, the ratio to the previous size (near 2 per doubling: linear; 4:
# quadratic) and fuse's and memplan's own share (--time-passes).
#
# The bound: the 100,000-node compiles take under 60 s each (when fuse
# and memplan were quadratic, the relu chain took hours).
# Exit status 1 when one does not. tests/compile_scale_test.sh checks the
# same in `make test-full`, and 32,000 nodes in `make test`.
#
# usage: bench/compile_scale.sh [SIZES...]   (8000 16000 32000 100000)
set -eu
cd "$(dirname "$0")/.."
bin=${DPC_BIN:-bin}
bound=60
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DPC_CACHE_DIR=$tmp/cache
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(8000 16000 32000 100000)

now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }
status=0
# compile NODES KIND: prints the row; ms in $ms.
compile() {
    local nodes=$1 kind=$2 t0
    bench/chain_net.sh "$nodes" "$kind" >"$tmp/$kind-$nodes.net"
    t0=$(now_ms)
    "$bin/dpc" "$tmp/$kind-$nodes.net" -o "$tmp/$kind-$nodes.plan"
    ms=$(($(now_ms) - t0))
}

echo "bound: a 100000-node network compiles in under $bound s"
printf '%-6s %8s %10s %8s\n' kind nodes seconds ratio
prev=0
for n in "${sizes[@]}"; do
    compile "$n" relu
    ratio=-
    [ "$prev" -gt 0 ] && ratio=$(awk -v a="$ms" -v b="$prev" 'BEGIN { printf "%.2f", b ? a / b : 0 }')
    printf '%-6s %8d %10s %8s\n' relu "$n" "$(secs "$ms")" "$ratio"
    prev=$ms
    if [ "$n" -ge 100000 ] && [ "$ms" -ge $((bound * 1000)) ]; then status=1; fi
done
compile 100000 dense
printf '%-6s %8d %10s %8s\n' dense 100000 "$(secs "$ms")" -
[ "$ms" -lt $((bound * 1000)) ] || status=1

big=${sizes[${#sizes[@]} - 1]}
echo "fuse and memplan at $big nodes (--time-passes, ms):"
"$bin/dpc" "$tmp/relu-$big.net" --time-passes | awk '$2 == "fuse" || $2 == "memplan" { print "  " $1, $2, $3 }'
t0=$(now_ms)
"$bin/dprun" "$tmp/relu-$big.plan" --device cpu --data synthetic --steps 1 >"$tmp/run.out" 2>&1 ||
    { cat "$tmp/run.out"; status=1; }
echo "dprun: the $big-node plan loaded, one step and the test set evaluated in $(secs $(($(now_ms) - t0))) s"
[ $status = 0 ] && echo "within the bound" || echo "OVER THE BOUND of $bound s"
exit $status
