#!/usr/bin/env bash
# The main job: set up .venv/ if needed, then `p2 demo`: the optimizer service
# plans, commits and replans a live DLRM-like job (an emulated 2 x 4 cluster as
# root, loopback otherwise). Extra arguments go to p2 demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/p2 demo --json p2-demo.json --plot p2-demo.png "$@"
