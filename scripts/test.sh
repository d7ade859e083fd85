#!/usr/bin/env bash
# The tests: every Rust test of the workspace, then the Python binding's.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
scripts/test-python.sh
