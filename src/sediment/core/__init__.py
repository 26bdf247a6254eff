"""The pure model: key regions, partitions, file references, table state and transactions.

Nothing here does I/O or imports a storage SDK; a test pins that boundary.
"""

from sediment.core.model import FileReference, Partition
from sediment.core.regions import Range, Region
from sediment.core.state import TableState

__all__ = ["FileReference", "Partition", "Range", "Region", "TableState"]
