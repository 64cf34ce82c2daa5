#!/usr/bin/env bash
# run: tier=test
# Long networks compile in time near linear in their length:
# fuse's convexity search and memplan's best fit were quadratic, so a chain
# of 100,000 relus, the frontend's most, took hours. bench/chain_net.sh writes the nets.
#   make test:      a 32,000-node relu chain compiles within 30 s (60 s in
#                   the sanitizer tree), and dprun loads its plan and trains
#                   a step;
#   make test-full: 100,000 nodes, a relu chain and a chain of 24,998 dense
#                   layers (as many parameters: the optimizer pass, dprun's
#                   store), each within 60 s, and the relu plan trains a
#                   step.
# The bounds are generous on purpose: they tell linear from quadratic, not
# one machine from another (bench/compile_scale.sh prints the times).
. tests/lib.sh
export DPC_CACHE_DIR=$tmp/cache

# compiles NODES KIND BOUND: dpc compiles the chain within BOUND seconds.
compiles() {
    local nodes=$1 kind=$2 bound=$3 net=$tmp/$2-$1.net plan=$tmp/$2-$1.plan rc t0 ms
    bench/chain_net.sh "$nodes" "$kind" >"$net"
    t0=$(date +%s%N)
    timeout "$bound" "$bin/dpc" "$net" -o "$plan" 2>"$tmp/err"
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    echo "dpc: $nodes-node $kind chain in $((ms / 1000)).$(printf %03d $((ms % 1000))) s (bound $bound s)"
    if [ $rc = 124 ]; then
        bad "$nodes-node $kind chain: dpc took more than $bound s"
    elif [ $rc != 0 ] || [ ! -s "$plan" ]; then
        bad "$nodes-node $kind chain: dpc exit $rc: $(head -c 300 "$tmp/err")"
    else
        ok
    fi
}

# trains NODES KIND: dprun loads the chain's plan and trains one step.
trains() {
    local plan=$tmp/$2-$1.plan
    [ -s "$plan" ] || return
    if timeout 300 "$bin/dprun" "$plan" --device cpu --data synthetic --steps 1 >"$tmp/out" 2>&1 &&
        grep -q '^Training time' "$tmp/out"; then ok; else
        bad "$1-node $2 chain: dprun: $(tail -n 3 "$tmp/out")"
    fi
}

bound=30
sanitized && bound=60
compiles 32000 relu $bound
trains 32000 relu
if tier_at_least full; then
    compiles 100000 relu 60
    trains 100000 relu
    compiles 100000 dense 60
fi
finish
