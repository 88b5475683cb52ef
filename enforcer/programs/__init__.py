"""Lowered reduction programs (P² §3.3) run on a flat tensor: :mod:`.executor`.

May import :mod:`enforcer.comm`.
"""
