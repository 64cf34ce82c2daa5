#!/usr/bin/env bash
# A long network of NODES graph nodes (the frontend's most is 100,000), on
# stdout: valid and trainable (CIFAR-shaped, synthetic data will do). relu
# (the default): a dense layer, then a chain of relus (one node each), then
# the classifier; dense: a chain of dense layers (four nodes each: weight,
# bias, GEMM, bias add), so as many parameters as layers.
#
# usage: bench/chain_net.sh NODES [relu|dense] > long.net
set -eu
nodes=${1:?usage: bench/chain_net.sh NODES [relu|dense]}
kind=${2:-relu}
case "$kind" in
relu) layers=$((nodes - 12)) line='    x = relu(x)' first='    x = dense(flatten(image), 10)' ;;
dense) layers=$(((nodes - 8) / 4)) line='    x = dense(x, 10)' first='    x = flatten(image)' ;;
*) echo "chain_net.sh: kind '$kind' is not relu or dense" >&2; exit 2 ;;
esac
[ "$layers" -ge 1 ] || { echo "chain_net.sh: $nodes nodes is too few" >&2; exit 2; }
cat <<EOT
# bench/chain_net.sh $nodes $kind: $layers $kind layers in a chain.
input image[3, 32, 32]
input label class(10)

network ${kind}_chain {
$first
EOT
awk -v n="$layers" -v line="$line" 'BEGIN { for (i = 0; i < n; i++) print line }'
cat <<'EOT'
    logits = dense(x, 10)
    loss = softmax_cross_entropy(logits, label)
}

train {
    batch 8 per device
    epochs 1
    init xavier(magnitude=2.24)
    optimizer sgd(momentum=0.9, wd=0.0001)
    lr {0: 0.01}
    data cifar10 { normalize mean(0.4914, 0.4822, 0.4465) std(0.2023, 0.1994, 0.2010) }
    eval batch 8
}
EOT
