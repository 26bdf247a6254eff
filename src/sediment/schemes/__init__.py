"""Co-sharding: partition schemes that several tables share, and joins that never shuffle.

A partition scheme (ClickHouse's "common sharding scheme") owns one partition tree in its own
log, ``schemes/<scheme id>/log/``; its member tables follow that tree (see
``sediment.core.transactions.schemes``), so records with one row key in different tables lie
in the same leaf, and a join runs leaf by leaf (``sediment.schemes.join``).
"""

from sediment.schemes.catalog import SchemeInfo

__all__ = ["SchemeInfo"]
