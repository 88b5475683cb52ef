"""The plan runtime: a committed plan enforced on one group (Syndicate §4.4, §5).

* :mod:`.plan_runtime` — ordered dispatch of motifs over channels (Python);
  :mod:`.native` — the same run by the C++ backend;
* :mod:`.dispatch` — the dispatcher's decision, pure; :mod:`.buffers` — an op's tensors as its buffer;
* :mod:`.ucc_motifs` — motifs on UCC channels;
* :mod:`.plan_file` — a plan from a value, JSON or a file, installed;
* :mod:`.plan_groups` — one plan on every group of the rank it names.

May import :mod:`enforcer.comm` and the modules on top; never the group, the link or the
programs/reshard/pipeline/measure rooms.
"""
