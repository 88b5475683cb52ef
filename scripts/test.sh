#!/usr/bin/env bash
# Set up .venv/ if needed and run the test suite. Extra arguments go to pytest.
#   scripts/test.sh           the whole suite (what CI runs)
#   scripts/test.sh --fast    the daily tier: no multi-rank, namespace or slow tests (~7 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit $?
marker=()
if [ "${1:-}" = "--fast" ]; then
    shift
    marker=(-m "not slow and not multiproc and not netns")
fi
.venv/bin/python -m pytest "${marker[@]}" "$@"
status=$?
if [ $status -eq 5 ]; then
    echo "test.sh: pytest collected no tests" >&2
    exit 0
fi
exit $status
