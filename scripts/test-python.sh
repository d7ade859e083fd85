#!/usr/bin/env bash
# The Python binding's tests: builds crates/strata-py into a virtual environment under
# target/ (as `pip install ./crates/strata-py` does) and runs its pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# maturin's build backend runs the `maturin` command it finds on the PATH.
export PATH="$PWD/$venv/bin:$PATH"
"$venv/bin/python" -m pip install -q "maturin>=1.5,<2" "pytest>=7"
"$venv/bin/python" -m pip install -q --no-build-isolation --force-reinstall --no-deps ./crates/strata-py
cd crates/strata-py
"../../$venv/bin/python" -m pytest -q tests
