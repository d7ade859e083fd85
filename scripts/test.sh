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
# They run again from the executables the first pass built: `cargo test -p strata` would
# build the crates anew with the features of that one package.
again=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
wanted = {
    "strata": None,
    "strata-server": {"model", "server", "collections", "streams"},
    "strata-cli": None,
}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    package = m["package_id"].split("#")[0].rstrip("/").split("/")[-1]
    name, kinds = m["target"]["name"], m["target"]["kind"]
    if package not in wanted:
        continue
    if wanted[package] is not None and (kinds != ["test"] or name not in wanted[package]):
        continue
    print(os.path.dirname(m["manifest_path"]), m["executable"])
')
test -n "$again"
for policy in tiering lazy; do
    echo "== the engine's, the server's and the binary's tests under STRATA_MERGE_POLICY=$policy"
    while read -r dir exe; do
        echo "== $policy: ${exe#"$PWD/"}"
        (cd "$dir" && STRATA_MERGE_POLICY=$policy "$exe" -q)
    done <<< "$again"
done
scripts/test-python.sh
