#!/usr/bin/env bash
# Create .venv/ and install everything the project needs. Idempotent: a second
# run with unchanged pyproject.toml and this script does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${P2_PYTHON:-python3}
stamp=.venv/.p2-setup
log=.venv/setup.log
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/p2 ]; then
    exit 0
fi
echo "setup: creating .venv/ and installing dependencies (once; log in $log)" >&2
[ -x .venv/bin/python ] || "$python" -m venv .venv
: > "$log"
pip() {
    if ! .venv/bin/python -m pip "$@" >> "$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "setup: 'pip $*' failed; full log in $log" >&2
        exit 1
    fi
}
pip install --upgrade pip
# PyTorch first and pinned: this takes the CPU build already on the machine
# instead of downloading gigabytes of CUDA packages.
pip install torch==2.13.0
pip install -e '.[dev]'
echo "$want" > "$stamp"
echo "setup: done" >&2
