#!/usr/bin/env bash
# Checks `flywheel launch` on the real binary: it is in --help, every rank's output is prefixed,
# and the exit code is the first failing rank's.
set -uo pipefail
FLYWHEEL="$1"
SOURCE="$2"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

help=$("$FLYWHEEL" --help) || fail "--help exited non-zero"
grep -q "launch" <<<"$help" || fail "--help does not list 'launch': $help"

# config print takes no rank flags: the ranks read RANK/WORLD_SIZE from the environment instead.
out=$("$FLYWHEEL" launch --nproc 2 --no-rank-flags -- config print "$SOURCE/examples/guess.toml")
rc=$?
[[ $rc -eq 0 ]] || fail "launch of two successful ranks exited $rc: $out"
grep -q "^\[rank 0\] \[model\]" <<<"$out" || fail "rank 0's output is not prefixed: $out"
grep -q "^\[rank 1\] \[model\]" <<<"$out" || fail "rank 1's output is not prefixed: $out"
grep -qv "^\[rank [01]\] " <<<"$out" && fail "unprefixed output: $(grep -v '^\[rank [01]\] ' <<<"$out")"

"$FLYWHEEL" config print /nonexistent/job.toml >/dev/null 2>&1
direct=$?
err=$("$FLYWHEEL" launch --nproc 2 --no-rank-flags -- config print /nonexistent/job.toml 2>&1)
rc=$?
[[ $direct -ne 0 && $rc -eq $direct ]] || fail "launch of failing ranks exited $rc, not the ranks' $direct: $err"
grep -q "^\[rank [01]\] flywheel: error:" <<<"$err" || fail "the ranks' errors are not prefixed: $err"

# The rank flags are appended to the command: config print does not take them, so every rank fails.
err=$("$FLYWHEEL" launch --nproc 2 --rendezvous 127.0.0.1:29511 -- config print x.toml 2>&1)
[[ $? -ne 0 ]] || fail "a command refusing the rank flags exited 0"
grep -q -- "--world-size" <<<"$err" || fail "rank flags not appended: $err"

err=$("$FLYWHEEL" launch --nproc 0 -- config print x.toml 2>&1)
[[ $? -eq 2 ]] || fail "--nproc 0 was accepted: $err"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "launch cli ok"
