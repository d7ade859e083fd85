#!/usr/bin/env bash
# The seed experiments docs/EXPERIMENTS.md records, each writing NAME.csv, NAME.svg and
# NAME.txt (what it printed) to docs/experiments/:
#   scripts/experiments.sh [--smoke] [EXPERIMENT...]
# Experiments: growth, server-mix, seven-tasks, flodb, reach, monkey, policies (default: all seven). --smoke runs
# each at its smallest scale (under a minute each) into a temporary directory, as CI does.
# server-mix and reach need redis-server on the PATH, and run target/release/strata, as
# seven-tasks does. reach (the merge operator, range deletes, checkpoints and backups) draws
# no figure: its results are a table.
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = --smoke ]; then smoke=1; shift; fi
target="${STRATA_COMPARE_TARGET:-$HOME/.cache/strata-compare-target}"
CC=clang CXX=clang++ cargo build --release -q -p strata-bench --features compare --target-dir "$target"
cargo build --release -q -p strata-cli
bench="$target/release/strata-bench"
if [ $smoke = 1 ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
else
  out=docs/experiments
fi
mkdir -p "$out"
common=(--out "$out" --db "${STRATA_EXPERIMENT_DB:-/tmp/strata-experiment}")

experiment() {
  local name=$1
  shift
  echo "== experiment $name: $*" >&2
  "$bench" experiment "$name" "${common[@]}" "$@"
}

run() {
  local started=$SECONDS
  case $1 in
  growth)
    if [ $smoke = 1 ]; then experiment growth --scale 0.002 --periods 10 --gets 2000 --scans 200
    else experiment growth --scale 1; fi ;;
  server-mix)
    if [ $smoke = 1 ]; then experiment server-mix --duration 1 --ratios 0.1,0.9 --rounds 1 --strata target/release/strata
    else experiment server-mix --strata target/release/strata; fi ;;
  seven-tasks)
    if [ $smoke = 1 ]; then experiment seven-tasks --counts 1000,10000 --strata target/release/strata
    else experiment seven-tasks --counts 1000,10000,100000,1000000 --strata target/release/strata; fi ;;
  flodb)
    if [ $smoke = 1 ]; then experiment flodb --threads 1,2 --updates 0,50 --initial 20000 --duration 0.3
    else experiment flodb; fi ;;
  reach)
    if [ $smoke = 1 ]; then experiment reach --increments 20000 --counters 100 --checkpoint_mb 16 \
      --range_keys 50000 --tombstones 100 --gets 20000 --strata target/release/strata \
      --copy_dir "$out/copies"
    else experiment reach --strata target/release/strata; fi ;;
  monkey)
    if [ $smoke = 1 ]; then experiment monkey --num 200000 --lookups 20000 --rounds 1
    else experiment monkey; fi ;;
  policies)
    if [ $smoke = 1 ]; then experiment policies --num 100000 --updates 50000 --lookups 5000 --ratios 2,4
    else experiment policies; fi ;;
  *) echo "unknown experiment $1 (growth, server-mix, seven-tasks, flodb, reach, monkey, policies)" >&2; exit 2 ;;
  esac
  echo "== experiment $1 took $((SECONDS - started)) s" >&2
  # Every experiment leaves its results and its figure (reach: its table).
  exts="csv svg txt"
  if [ "$1" = reach ]; then exts="csv txt"; fi
  for ext in $exts; do
    test -s "$out/$1.$ext" || { echo "experiment $1 left no $1.$ext" >&2; exit 1; }
  done
}

if [ $# -eq 0 ]; then set -- growth server-mix seven-tasks flodb reach monkey policies; fi
for e in "$@"; do run "$e"; done
