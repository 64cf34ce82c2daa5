#!/usr/bin/env bash
# run: tier=check
# scripts/deps.sh as a user without root on a machine that lacks build
# packages: it installs nothing, names exactly what is missing and the one
# command that installs it, and fails; with nothing missing it succeeds
# silently. The missing tools are hidden by a PATH holding only the ones
# kept; root drops to nobody (setpriv) for the run, in a folder of its own
# that nobody can reach (the runner's and the clone's may be private).
. tests/lib.sh
as_user=()
if [ "$(id -u)" = 0 ]; then
    if ! command -v setpriv >/dev/null; then
        bad "no setpriv to drop root (util-linux)"; finish; exit
    fi
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
home=$(mktemp -d /tmp/dpc-deps-test.XXXXXX)
trap 'rm -rf "$tmp" "$home"' EXIT
chmod 755 "$home"
mkdir -p "$home/bin"
cp scripts/deps.sh "$home/deps.sh"
for c in bash sh id cat cc gcc; do
    p=$(command -v "$c") && ln -s "$p" "$home/bin/$c"
done
cd "$home" || exit 1
out=$("${as_user[@]}" env PATH="$home/bin" bash deps.sh build 2>&1); rc=$?
check "exit 1 when flex, bison and OpenMPI are missing (exit $rc)" [ $rc = 1 ]
has() { grep -q -F -- "$1" <<<"$2"; }
check "names the missing packages: $out" has 'missing: flex bison openmpi-bin libopenmpi-dev' "$out"
check "gives the one command: $out" has "sudo sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends flex bison openmpi-bin libopenmpi-dev'" "$out"
says_no() { ! grep -q -- "$1" <<<"$2"; } # says_no PATTERN TEXT
check "installs nothing: $out" says_no installing "$out"
out=$("${as_user[@]}" env PATH="$home/bin" MPI=0 bash deps.sh build 2>&1)
check "MPI=0 asks for no MPI package: $out" says_no openmpi "$out"
check "MPI=0 still asks for flex: $out" has 'missing: flex bison' "$out"
# Everything there (this machine has built dpc): silent success.
out=$("${as_user[@]}" env PATH="$PATH" bash deps.sh build 2>&1); rc=$?
check "nothing missing: exit 0 (exit $rc: $out)" [ $rc = 0 ]
check "nothing missing: says nothing ($out)" [ -z "$out" ]
finish
