#!/usr/bin/env bash
# tests/gpu/cost_vs_profile.sh COST PROFILE — the modelled and the measured
# time of every kernel, GEMM and library convolution of the train program, side by side, so the
# first run on a GPU calibrates the cost model (docs/DESIGN.md §7.6).
#   COST     what `dpc MODEL.net --cost` printed
#   PROFILE  what `DPC_PROFILE=1 dprun PLAN ...` printed on stderr: the train
#            program's profile is the one with the most calls
# Prints `name calls modelled_us measured_us measured/modelled`, slowest
# measured first, then one `step` line with the modelled step (launches
# included) and the measured time per run, then one `unmatched:` line. GEMMs
# are matched by shape (`gemm MxNxK`), convolutions by direction and shape
# (`conv_DIR_CxHxK_kR_sS`, `_g` when grouped); the profile names the op too,
# the model does not. A modelled row the profile lacks (a convolution cuDNN
# declined, whose im2col kernels and GEMMs the profile has under their own
# names; a row past the profile's top 60) shows `-` and is counted on the
# `unmatched:` line, with the measured rows the model lacks. Exit 1 when the
# cost report has no train table or the profile no profile.
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
    # The profiles, every one kept: the train program is the one with the
    # most calls (the eval program has no backward pass). Its count equals
    # the train table'"'"'s unless cuDNN declined convolutions: each then ran
    # its im2col alternative, more calls under other names.
    /^[a-z]+: profile of / {
        np++; pcalls[np] = $(NF - 1); pstep[np] = $6 * 1000
        next
    }
    np && $2 == "ms" {
        key = $NF
        if ($(NF - 3) == "gemm") key = "gemm " $NF
        if ($(NF - 5) == "conv") key = "conv_" $(NF - 3) "_" $(NF - 2) "_" $(NF - 1) "_" $NF
        if (!((np, key) in meas)) pkeys[np, ++pn[np]] = key
        meas[np, key] += $1 * 1000
        next
    }
    END {
        if (!nkeys) { print "cost_vs_profile: no train table in the cost report" > "/dev/stderr"; exit 1 }
        best = 0
        for (p = 1; p <= np; p++) if (!best || pcalls[p] > pcalls[best]) best = p
        if (!best) { print "cost_vs_profile: no profile in " FILENAME > "/dev/stderr"; exit 1 }
        step_meas = pstep[best]
        for (i = 1; i <= pn[best]; i++) { k = pkeys[best, i]; m[k] = meas[best, k] }
        printf "%-44s %5s %12s %12s %9s\n", "name", "calls", "modelled_us", "measured_us", "ratio"
        for (i = 1; i <= nkeys; i++) {
            k = order[i]
            if (k in m)
                line[i] = sprintf("%-44s %5d %12.1f %12.1f %9.2f", k, calls[k], model[k], m[k],
                                  model[k] > 0 ? m[k] / model[k] : 0)
            else {
                line[i] = sprintf("%-44s %5d %12.1f %12s %9s", k, calls[k], model[k], "-", "-")
                missing++; missing_us += model[k]
                if (missing <= 5) missing_names = missing_names (missing > 1 ? ", " : "") k
            }
            sortkey[i] = (k in m) ? m[k] : -1
        }
        # Slowest measured first (insertion sort: a few hundred rows).
        for (i = 2; i <= nkeys; i++)
            for (j = i; j > 1 && sortkey[j] > sortkey[j - 1]; j--) {
                t = sortkey[j]; sortkey[j] = sortkey[j - 1]; sortkey[j - 1] = t
                t = line[j]; line[j] = line[j - 1]; line[j - 1] = t
            }
        for (i = 1; i <= nkeys; i++) print line[i]
        # What did not join: modelled rows the profile lacks (a declined
        # convolution, a row past the profile'"'"'s top 60), measured ones the
        # model lacks (the declined convolutions'"'"' im2col kernels and GEMMs).
        for (k in m) if (!(k in model)) { extra++; extra_us += m[k] }
        printf "unmatched: %d modelled rows not measured (%.1f us modelled%s%s%s), %d measured rows not modelled (%.1f us measured); the train profile has %d calls, the model %d\n",
               missing, missing_us, (missing ? ": " : ""), missing_names, (missing > 5 ? ", ..." : ""),
               extra, extra_us, pcalls[best], ncalls
        printf "%-44s %5d %12.1f %12.1f %9.2f\n", "step", ncalls, step_model, step_meas,
               (step_model > 0 ? step_meas / step_model : 0)
    }
' "$cost" "$profile"
