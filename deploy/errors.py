"""The one error type of ``deploy/``: bad input to, or an impossible request
of, the emulated cluster (a bad name, a rate out of range, no privileges, a
cluster that does not exist). Its message is one readable line; the ``p2``
CLI maps it to exit code 2 in the same place as the optimizer's errors."""


class DeployError(ValueError):
    """Something ``deploy/`` cannot do as asked; the message says what and how to fix it."""
