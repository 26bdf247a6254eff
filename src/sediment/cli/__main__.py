"""``python -m sediment.cli``: the same command as the ``sediment`` console script."""

from sediment.cli.app import main

main()
