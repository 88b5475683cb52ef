"""The plan runtime: a committed plan enforced on one group (Syndicate §4.4, §5).

* :mod:`.protocol` — what a runtime is to its callers (:class:`~.protocol.Runtime`) and what it uses
  of its group;
* :mod:`.plan_runtime` — ordered dispatch of motifs over channels (Python);
  :mod:`.native` — the same run by the C++ backend;
* :mod:`.dispatch` — the dispatcher's decision, pure; :mod:`.buffers` — an op's tensors as its buffer;
  :mod:`.group_ops` — the plan's ops of one group;
* :mod:`.channels` — the plan's channels, which both runtimes hold: their communicators, each bound to
  its network interface, and each channel's motif runner;
* :mod:`.motif_runner` — running one motif on a channel: :mod:`.sendrecv_motifs` (gloo, NCCL),
  :mod:`.ucc_motifs` (UCC);
* :mod:`.plan_file` — a plan from a value, JSON or a file, installed;
* :mod:`.plan_groups` — one plan on every group of the rank it names.

May import :mod:`enforcer.comm` and the modules on top; never the group, the link or the
programs/reshard/pipeline/measure rooms (a group is seen through :mod:`.protocol`).
"""
