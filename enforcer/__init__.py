"""The enforcer: the data plane that runs plans on torch.distributed.

* :mod:`enforcer.layout` — which element ranges each device moves in each step
  of a lowered reduction program (pure);
* :mod:`enforcer.p2p` — bandwidth-optimal ReduceScatter, AllGather, Reduce and
  Broadcast from the inner backend's send/recv;
* :mod:`enforcer.executor` — runs lowered programs on a flat tensor.
"""
