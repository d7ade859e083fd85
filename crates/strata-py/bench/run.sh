#!/usr/bin/env bash
# Runs bench.py in its own virtual environment (target/python-bench-venv) with plyvel and
# rocksdict from PyPI and this checkout's binding built in release mode. Arguments go to
# bench.py.
set -euo pipefail
cd "$(dirname "$0")/../../.."
venv=target/python-bench-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
export PATH="$PWD/$venv/bin:$PATH"
"$venv/bin/python" -m pip install -q "maturin>=1.5,<2" "plyvel>=1.5" "rocksdict>=0.3"
"$venv/bin/python" -m pip install -q --no-build-isolation --force-reinstall --no-deps ./crates/strata-py
"$venv/bin/python" -c 'from importlib.metadata import version as v; import plyvel
print("plyvel", v("plyvel"), "(LevelDB", plyvel.__leveldb_version__ + "), rocksdict", v("rocksdict"))'
exec "$venv/bin/python" crates/strata-py/bench/bench.py "$@"
