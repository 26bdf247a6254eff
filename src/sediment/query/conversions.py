"""Conversions of a query's answer to what engines and DataFrame users hold: Arrow tables and
batches, pandas (``to_arrow``, ``to_pandas``, ``to_batches``).

A mixin of :class:`~sediment.table.Table`: every conversion is ``Table.prepare`` (the one path
every reader takes) followed by a change of container, so each gives exactly ``query()``'s
answer at the same version.
"""

from __future__ import annotations


class Conversions:
    """``Table``'s conversion methods (see the module docstring)."""
