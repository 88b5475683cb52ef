"""Reserved (shell): the service's transport-agnostic core, gRPC servicers,
the 2PC coordinator's driver and the plan stores (SQLite, Redis).

May import: every package of ``optimizer_service`` and the generated ``proto``.
"""
