"""The Python of the protocol buffers in ``proto/p2/`` (package ``p2.v1``).

Generated from the ``.proto`` sources by ``grpcio-tools`` when the package is
built or installed, and never committed; see :mod:`p2.v1`. Nothing here is
edited by hand except the two ``__init__`` modules."""
