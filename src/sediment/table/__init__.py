"""Table: one Sediment table, its state at any version, and the operations on it.

A façade: every operation is a service (ingest, compaction, maintenance, dump, query
preparation) given the table's :class:`~sediment.handle.TableHandle`, never the ``Table``
itself, so the services do not depend on this module.

The façade is cut by what its methods do, one module each (``base``: the handle and
the state; ``versions``, ``alter``, ``writes``, ``reads``, ``changes``,
``maintenance``), and :class:`Table` joins them.
"""

from __future__ import annotations

from sediment.table.alter import TableAlter
from sediment.table.changes import TableChanges
from sediment.table.maintenance import TableMaintenance
from sediment.table.writes import TableWrites

__all__ = ["Table"]


class Table(TableChanges, TableWrites, TableAlter, TableMaintenance):
    """A table of a :class:`Store`. Obtain one with ``store.table(name)``.

    Errors (all :class:`~sediment.errors.SedimentError`): every method raises StorageError when
    the object store fails; every method taking a ``version`` raises QueryError for an unknown
    one and VersionExpiredError (a QueryError) for one whose log or files are past
    ``retention.seconds``, and for a tag name InvalidTagNameError or TagNotFoundError. What
    else a method raises, its own docstring says.
    """

    def __repr__(self) -> str:
        return f"Table({self.name!r}, store={self.store.uri!r})"
