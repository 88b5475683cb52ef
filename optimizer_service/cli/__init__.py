"""The ``p2`` command line: one verb per capability, each with ``--help``."""

from optimizer_service.cli.app import main

__all__ = ["main"]
