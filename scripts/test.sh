#!/usr/bin/env bash
# The tests: every Rust test of the workspace, then the Python binding's.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
# The engine's tests again under the tiered merge policies (the tests that build their
# options with `common::tiny_options` take the policy from STRATA_MERGE_POLICY).
for policy in tiering lazy; do
    echo "== the engine's tests under STRATA_MERGE_POLICY=$policy"
    STRATA_MERGE_POLICY=$policy cargo test -p strata --tests
done
scripts/test-python.sh
