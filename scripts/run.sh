#!/usr/bin/env bash
# The main job: set up .venv/ if needed, then synthesize placements and
# reduction programs for a 4-node A100 cluster. Extra arguments go to p2 synth.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/p2 synth --topology gcp-a100-4n --axes 4,16 --reduce 0 --top 3 "$@"
