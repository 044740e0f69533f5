#!/usr/bin/env bash
# check_figures.py on the checkout passes, and fails when a cited figure is edited, when its
# result file is missing, and when its path names nothing.
set -uo pipefail
SOURCE="$1"
source "$SOURCE/src/flywheel/runtime/process_test_lib.sh"  # TMP, fail
CHECK="$SOURCE/bench/check_figures.py"

python3 "$CHECK" --root "$SOURCE" || fail "the checkout's marked figures do not match their files"

# A root with README.md and docs/ of its own, and the checkout's result files.
mkdir -p "$TMP/root/docs" "$TMP/root/bench"
ln -s "$SOURCE/bench/results" "$TMP/root/bench/results"
expect_problem() {  # expect_problem WHAT SED-EXPRESSION PATTERN
  sed "$2" "$SOURCE/README.md" >"$TMP/root/README.md"
  cmp -s "$SOURCE/README.md" "$TMP/root/README.md" && { fail "$1: the edit changed nothing"; return; }
  out=$(python3 "$CHECK" --root "$TMP/root")
  [[ $? == 1 ]] || fail "$1: check_figures passed"
  grep -q "$3" <<<"$out" || fail "$1: no problem naming '$3' in: $out"
}
expect_problem "an edited figure" 's/0\.84×<!-- fig/0.86×<!-- fig/' "figure 0.86 but"
expect_problem "a missing file" 's/elastic-seed4-h\.json samples_per_s_vs_best_static_steady/gone.json samples_per_s_vs_best_static_steady/' "gone.json"
expect_problem "a path naming nothing" 's/samples_per_s_vs_best_static_steady -->/no_such_key -->/' "no_such_key: found None"
echo "check_figures_test: $failures failure(s)"
((failures == 0))
