"""The multiproc test tier runs functions on a real local world: :mod:`deploy.local_world`."""

from deploy.local_world import DEFAULT_TIMEOUT, run_world

__all__ = ["DEFAULT_TIMEOUT", "run_world"]
