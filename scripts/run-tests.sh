#!/usr/bin/env bash
# The test suite of one tier (tests/tiers.py), in three phases; `make test` runs `fast`, `make test-full` `full`.
#   1. most tests, two at a time (pytest -n 2; runs never collide);
#   2. those marked `timing` (they measure delays, rates, stall lengths, hang bounds), two at a time, away
#      from the CPU-heavy searches of phase 1;
#   3. those marked `exclusive` (nothing of chaos left anywhere on the machine), one at a time.
# Each phase runs even if an earlier one failed; the script fails if any did. It prints each phase's wall
# time, the 25 slowest tests of the tier and how many real jobs (chaos runs, references included) it started.
# Reference runs are shared by every test and xdist worker through one cache ($CHAOS_CACHE_DIR, default
# .test-cache/ in the checkout: empty in a fresh clone).
set -uo pipefail
tier=${1:?usage: scripts/run-tests.sh fast|full}
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
case $tier in
  fast) select="not full and " ;;
  full) select="" ;;
  *) echo "run-tests: tier must be fast or full, not $tier" >&2; exit 2 ;;
esac
export CHAOS_CACHE_DIR=${CHAOS_CACHE_DIR:-$PWD/.test-cache}
tmp=/tmp/chaos-tests-$tier  # short: unix sockets of the labs live under test directories
rm -rf "$tmp" && mkdir -p "$tmp"
start=$(date +%s)
rc=0
phase() {  # phase NAME PYTEST-ARGS...
    local name=$1 t0 code; shift
    t0=$(date +%s)
    "$py" -m pytest -v -p no:cacheprovider --basetemp="$tmp/$name" --junitxml="$tmp/$name.xml" "$@"
    code=$?
    [ "$code" = 0 ] || [ "$code" = 5 ] || rc=1  # 5: this tier has no test of this phase
    echo "$name $(( $(date +%s) - t0 )) $code" >> "$tmp/phases"
}
phase parallel -n 2 --dist worksteal -m "${select}not timing and not exclusive"
phase timing -n 2 --dist worksteal -m "${select}timing"
phase exclusive -p no:xdist -m "${select}exclusive"
"$py" -m tests.ci_report "$tier" "$tmp" "$start" "$CHAOS_CACHE_DIR"
exit $rc
