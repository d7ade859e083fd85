#!/usr/bin/env bash
# The reliability suite at soak length (not part of CI): SIGKILL cycles of the engine and of
# the server, clean and torn power losses, the fault and corruption sweeps, and every fuzz
# target, with checksum checks off, for a number of executions. Prints the figures that
# docs/RELIABILITY.md records.
#
#   scripts/soak.sh [CYCLES] [FUZZ_RUNS] [FUZZ_MAX_SECONDS]
#
# CYCLES SIGKILLs of the engine (and a tenth as many of the server), CYCLES clean and CYCLES
# torn power losses, each fuzz target for FUZZ_RUNS executions or FUZZ_MAX_SECONDS, whichever
# ends first. Defaults: 1000, 10000000, 3600.
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-1000}
fuzz_runs=${2:-10000000}
fuzz_seconds=${3:-3600}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Keeps what matches $1 in a step's output, to the end of its line (a test's first line of
# output shares a line with the test's name); a step that printed none of it (it did not
# build, say) is a failure, written to the log.
figures() {
  grep -oE "($1).*" || echo "FAILED: no figures from this step"
}
echo "soak at $(git rev-parse --short HEAD): $cycles cycles, fuzz targets $fuzz_runs runs or $fuzz_seconds s each" | tee "$log"

echo "== SIGKILL cycles (engine)"
STRATA_CRASH_CYCLES=$cycles cargo test --release -p strata --test crash -- --nocapture 2>&1 |
  figures "crash_cycles: [0-9]|panicked|FAILED" | tee -a "$log"

echo "== SIGKILL cycles (server)"
STRATA_SERVER_CRASH_CYCLES=$(( (cycles + 9) / 10 )) cargo test --release -p strata-cli --test serve across_sigkills -- --nocapture 2>&1 |
  figures "server crash test:|server bank:|panicked|FAILED" | tee -a "$log"

echo "== power losses, fault sweep, corruption sweep"
# The power-loss test simulates 60 clean and 60 torn losses per unit of scale.
STRATA_RELIABILITY_SCALE=$(( (cycles + 59) / 60 )) cargo test --release -p strata --test reliability -- --nocapture --test-threads=1 2>&1 |
  figures "power_loss: [0-9]|fault injection:|corruption:|stress: [0-9]|panicked|FAILED" | tee -a "$log"

echo "== fuzz targets, checksum checks off"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in block sst wal write_batch manifest_edit resp; do
  mkdir -p "fuzz/corpus/$target"
  (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" "seeds/$target" -- \
    -runs="$fuzz_runs" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 2>&1 |
    figures "^Done|^==|SUMMARY|panicked|Test unit written" | sed "s/^/fuzz $target: /") |
    tee -a "$log"
done

echo "== figures"
cat "$log"
if grep -qE "panicked|FAILED|SUMMARY|Test unit written" "$log"; then
  echo "soak: FAILED"
  exit 1
fi
echo "soak: ok"
