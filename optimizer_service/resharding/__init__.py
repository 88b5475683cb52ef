"""Reserved: cross-mesh resharding and pipeline schedules (Zhuang et al., MLSys
2023: sharding specs and unit tasks §2–3.1, load balancing §3.2, eager-1F1B §4).

May import: ``hardware``, ``plan`` (and ``errors``, ``units``).
"""
