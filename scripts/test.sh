#!/usr/bin/env bash
# The tests: every Rust test of the workspace, then the tests that run the engine's merge
# policies again under the tiered ones, then the Python binding's.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
# Every engine test builds its options from `common::options` or `common::tiny_options`, and
# the server's model and command tests and the `strata` binary's tests from theirs, all of
# which take the merge policy from STRATA_MERGE_POLICY; a test of one policy's own shape names
# its policy (the crash and power-loss tests cycle through the policies on their own).
for policy in tiering lazy; do
    echo "== the engine's, the server's and the binary's tests under STRATA_MERGE_POLICY=$policy"
    STRATA_MERGE_POLICY=$policy cargo test -p strata --tests
    STRATA_MERGE_POLICY=$policy cargo test -p strata-server --test model --test server --test collections \
        --test streams
    STRATA_MERGE_POLICY=$policy cargo test -p strata-cli --tests
done
scripts/test-python.sh
