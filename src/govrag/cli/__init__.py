"""The ``govrag`` command line: a thin adapter over the application API (``govrag.app``).

``main.py`` assembles the commands; each module holds one group of them; ``edge.py`` is what
runs around every command so that no bad input ends in a traceback.
"""

from __future__ import annotations


def main() -> None:
    """The ``govrag`` console script."""
    from govrag.cli.main import main as run

    run()
