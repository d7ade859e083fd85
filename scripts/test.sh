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
import json, os, sys, tomllib
wanted = {
    "strata": None,
    "strata-server": {"model", "server", "collections", "streams"},
    "strata-cli": None,
}
found = {name: 0 for name in wanted}
named = set()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    with open(m["manifest_path"], "rb") as f:
        package = tomllib.load(f)["package"]["name"]
    name, kinds = m["target"]["name"], m["target"]["kind"]
    if package not in wanted:
        continue
    if wanted[package] is not None and (kinds != ["test"] or name not in wanted[package]):
        continue
    found[package] += 1
    if wanted[package] is not None:
        named.add(name)
    print(os.path.dirname(m["manifest_path"]), m["executable"])
# A package or a named target that went missing fails the run, not the passes silently.
missing = [p for p, n in found.items() if n == 0] + sorted(wanted["strata-server"] - named)
if missing:
    sys.exit("test.sh: no test executable for " + ", ".join(missing))
')
for policy in tiering lazy; do
    echo "== the engine's, the server's and the binary's tests under STRATA_MERGE_POLICY=$policy"
    while read -r dir exe <&3; do
        echo "== $policy: ${exe#"$PWD/"}"
        (cd "$dir" && STRATA_MERGE_POLICY=$policy "$exe" -q </dev/null)
    done 3<<< "$again"
done
scripts/test-python.sh
