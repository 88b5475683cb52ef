"""Reserved (shell): the FastAPI dashboard over the service core.

May import: ``service`` (and what it exposes).
"""
