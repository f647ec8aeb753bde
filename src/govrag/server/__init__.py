"""The HTTP edge (``govrag serve``): a thin adapter over the application API.

``app.py`` builds the FastAPI application for one opened deployment; ``bodies.py`` holds the
request bodies; ``problems.py`` turns govrag's errors into ``application/problem+json``.
Identity comes from the bearer token only (``Govrag.verify_token``). Needs the ``server``
extra; importing it without raises :class:`~govrag.errors.MissingExtraError`.
"""

from govrag.server.app import create_app

__all__ = ["create_app"]
