#!/usr/bin/env bash
# The tests: every Rust test of the workspace, then the Python binding's.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
# The engine's tests again under the tiered merge policies: those that build their options
# with `common::tiny_options`, which takes the policy from STRATA_MERGE_POLICY (the crash
# and power-loss tests cycle through the policies on their own).
tiny_options_tests=()
for f in crates/strata/tests/*.rs; do
    if grep -q tiny_options "$f"; then
        tiny_options_tests+=(--test "$(basename "$f" .rs)")
    fi
done
for policy in tiering lazy; do
    echo "== the engine's tests under STRATA_MERGE_POLICY=$policy: ${tiny_options_tests[*]}"
    STRATA_MERGE_POLICY=$policy cargo test -p strata "${tiny_options_tests[@]}"
done
scripts/test-python.sh
