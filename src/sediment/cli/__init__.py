"""The ``sediment`` command (see :mod:`sediment.cli.app`)."""

from sediment.cli.app import app, main

__all__ = ["app", "main"]
