"""The pure model: key regions, partitions, file references, table state and transactions.

Nothing here does I/O or imports a storage SDK; a test pins that boundary.
"""

from sediment.core import boxes as _boxes  # noqa: F401 (registers Region's per-field form)
from sediment.core import cells as _cells  # noqa: F401 (registers box partitions' regions)
from sediment.core.model import FileReference, Partition, Region
from sediment.core.ranges import Range
from sediment.core.state import TableState

__all__ = ["FileReference", "Partition", "Range", "Region", "TableState"]
