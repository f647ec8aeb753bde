"""``python -m govrag.cli``."""

from govrag.cli.main import main

main()
