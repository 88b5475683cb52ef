"""Cross-mesh resharding on real tensors (Zhuang et al., MLSys 2023, §2.2, §3.1).

* :mod:`.resharder` — a lowered resharding program run on every rank;
* :mod:`.strategies` — the four ways one unit task moves its slice;
* :mod:`.api` — resharding for PyTorch users and the DTensor adapter.

May import :mod:`enforcer.comm`.
"""
