"""Inner communication: the backends motifs and programs run on.

* :mod:`.inner` — which inner backend per device (gloo, NCCL, UCC) and how to make one, bound to a
  network interface (the one way the enforcer binds a channel to a NIC);
* :mod:`.ucc` — UCC as an inner backend and a channel's transport (``enforcer._ucc``);
* :mod:`.sendrecv` — ring and chain collectives built from an inner backend's send and recv;
* :mod:`.subgroups` — torch process groups per member set, made collectively (bound to an interface
  through :mod:`.inner`).

Imports none of the enforcer's rooms (only settings and the plan values).
"""
