"""The Python of the protocol buffers in ``proto/p2/`` (package ``p2.v1``).

Generated from the ``.proto`` sources by ``grpcio-tools`` and never committed;
see :mod:`p2.v1`. Nothing here is edited by hand except the small loader."""
