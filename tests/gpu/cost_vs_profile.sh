#!/usr/bin/env bash
# tests/gpu/cost_vs_profile.sh COST PROFILE — the modelled and the measured
# time of every kernel, GEMM and library convolution of the train program, side by side, so the
# first run on a GPU calibrates the cost model (docs/DESIGN.md §7.6).
#   COST     what `dpc MODEL.net --cost` printed
#   PROFILE  what `DPC_PROFILE=1 dprun PLAN ...` printed on stderr: the train
#            program's profile is the one with as many calls as the train
#            table has rows
# Prints `name calls modelled_us measured_us measured/modelled`, slowest
# measured first, then one `step` line with the modelled step (launches
# included) and the measured time per run. GEMMs are matched by shape
# (`gemm MxNxK`), convolutions by direction and shape (`conv_DIR_CxHxK_kR_sS`, `_g` when grouped);
# the profile names the op too, the model does not. A row
# the profile's top 60 leaves out shows `-`. Exit 1 when either input lacks
# the train program.
set -eu
cost=${1:?usage: cost_vs_profile.sh COST PROFILE} profile=${2:?usage: cost_vs_profile.sh COST PROFILE}
awk '
    # The cost table: rows between "train program on" and "train total:".
    FNR == NR {
        if ($0 ~ /^train program on /) { intrain = 1; next }
        if ($0 ~ /^train total: modelled step/) { intrain = 0; step_model = $5; next }
        if ($0 ~ /^train total: .* kernels and/) { ncalls += $3 + $6; next }
        if ($0 ~ /^train total: .* library convolutions/) { ncalls += $3; next }
        if (!intrain || $1 == "kernel") next
        key = $1
        if (key ~ /^gemm_/) { key = key; sub(/^gemm_/, "gemm ", key); sub(/_bf16$/, "", key) }
        if (key ~ /^conv_/) sub(/_(bf16|tf32)$/, "", key)
        if (!(key in model)) order[++nkeys] = key
        model[key] += $6; calls[key]++
        next
    }
    # The profiles: take the one whose call count is the train tables.
    /^dpc: profile of / {
        n = $(NF - 1); take = (ncalls > 0 && n == ncalls)
        if (take) { found = 1; step_meas = $6 * 1000 }
        next
    }
    take && $2 == "ms" {
        key = $NF
        if ($(NF - 3) == "gemm") key = "gemm " $NF
        if ($(NF - 5) == "conv") key = "conv_" $(NF - 3) "_" $(NF - 2) "_" $(NF - 1) "_" $NF
        meas[key] += $1 * 1000
        next
    }
    END {
        if (!nkeys) { print "cost_vs_profile: no train table in the cost report" > "/dev/stderr"; exit 1 }
        if (!found) {
            print "cost_vs_profile: no profile with " ncalls " calls (the train program)" > "/dev/stderr"
            exit 1
        }
        printf "%-44s %5s %12s %12s %9s\n", "name", "calls", "modelled_us", "measured_us", "ratio"
        for (i = 1; i <= nkeys; i++) {
            k = order[i]
            if (k in meas)
                line[i] = sprintf("%-44s %5d %12.1f %12.1f %9.2f", k, calls[k], model[k], meas[k],
                                  model[k] > 0 ? meas[k] / model[k] : 0)
            else
                line[i] = sprintf("%-44s %5d %12.1f %12s %9s", k, calls[k], model[k], "-", "-")
            sortkey[i] = (k in meas) ? meas[k] : -1
        }
        # Slowest measured first (insertion sort: a few hundred rows).
        for (i = 2; i <= nkeys; i++)
            for (j = i; j > 1 && sortkey[j] > sortkey[j - 1]; j--) {
                t = sortkey[j]; sortkey[j] = sortkey[j - 1]; sortkey[j - 1] = t
                t = line[j]; line[j] = line[j - 1]; line[j - 1] = t
            }
        for (i = 1; i <= nkeys; i++) print line[i]
        printf "%-44s %5d %12.1f %12.1f %9.2f\n", "step", ncalls, step_model, step_meas,
               (step_model > 0 ? step_meas / step_model : 0)
    }
' "$cost" "$profile"
