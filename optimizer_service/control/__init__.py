"""Reserved: the control plane's decisions as pure functions
``(state, event, now) -> (state, actions)`` — the 2PC coordinator and
participant, the replanning policy, iteration detection (Syndicate §4.4, §5).

May import: ``plan`` (and ``errors``, ``units``).
"""
