#!/usr/bin/env bash
# Set up .venv/ if needed and run the test suite. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit $?
.venv/bin/python -m pytest "$@"
status=$?
if [ $status -eq 5 ]; then
    echo "test.sh: pytest collected no tests" >&2
    exit 0
fi
exit $status
