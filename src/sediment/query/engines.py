"""External engines over a pinned version of a table: DuckDB views, DataFusion tables, Polars
frames, and a file plan for engines that read Parquet themselves (``to_duckdb``,
``register_datafusion``, ``to_polars``, ``plan_files``), plus metadata as Arrow tables
(``inspect``).

A mixin of :class:`~sediment.table.Table`: every route gives exactly ``query()``'s answer at
the version it pins, regions and iterators included.
"""

from __future__ import annotations


class EngineMethods:
    """``Table``'s engine methods (see the module docstring)."""
