"""CLI command: sediment dashboard."""

from __future__ import annotations

import typer

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""
