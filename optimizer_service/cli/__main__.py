"""``python -m optimizer_service.cli`` is the ``p2`` command."""

from optimizer_service.cli.app import run

run()
