"""``python -m govrag``: the ``govrag`` command line."""

from govrag.cli.main import main

main()
