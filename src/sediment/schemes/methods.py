"""The partition-scheme methods of ``Store`` (co-sharding), kept apart from the table catalog."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sediment.schemes.catalog import (
    CatalogStore,
    SchemeInfo,
    create_scheme,
    describe_scheme,
    drop_scheme,
    scheme_names,
    set_scheme_properties,
)

if TYPE_CHECKING:
    from sediment.maintenance.splitting import SplitResult

class SchemeMethods:
    """Mixed into ``Store``: every method works on the store's own catalog."""

    def create_scheme(self: CatalogStore, name: str, row_keys: Sequence[Any],
                      split_points: Sequence[Any] | None = None, *,
                      properties: Mapping[str, Any] | None = None) -> SchemeInfo:
        """Create a partition scheme: one partition tree (cut at ``split_points``) that the
        tables created with ``scheme=name`` share, split on their combined records once a
        leaf holds more than ``partition.split.threshold`` (the store's default, or
        ``properties``).

        Raises: InvalidTableNameError (a bad name), SchemeExistsError, SchemaError (bad row
        keys or split points), PropertyError, TransactionError, StorageError."""
        return create_scheme(self, name, row_keys, split_points, dict(properties or {}))

    def schemes(self: CatalogStore) -> list[str]:
        """Names of the partition schemes of the store, sorted.

        Raises: StorageError."""
        return scheme_names(self)

    def describe_scheme(self: CatalogStore, name: str) -> SchemeInfo:
        """A scheme's row keys, tree version, number of leaves and member tables.

        Raises: SchemeNotFoundError, CorruptMetadataError, StorageError."""
        return describe_scheme(self, name)

    def set_scheme_properties(self: CatalogStore, name: str,
                              properties: Mapping[str, Any]) -> SchemeInfo:
        """Change a scheme's properties (only ``partition.split.threshold`` exists: what a
        leaf's records, summed over every member, must exceed for it to split; setting it on
        any member does the same). Later splits use the new value.

        Raises: SchemeNotFoundError, PropertyError (another property, a bad value),
        TransactionError, StorageError."""
        return set_scheme_properties(self, name, dict(properties))

    def drop_scheme(self: CatalogStore, name: str) -> None:
        """Drop a partition scheme that no table uses.

        Raises: SchemeNotFoundError; SchemeInUseError (naming the member tables: drop them
        first); StorageError."""
        drop_scheme(self, name)

    def split_scheme(self: CatalogStore, name: str) -> SplitResult:
        """Split every leaf of the scheme whose records, summed over all its member tables,
        exceed the threshold (one commit in the scheme's log each), then bring every member's
        tree up to the scheme's.

        Raises: SchemeNotFoundError, TransactionError, StorageError."""
        from sediment.maintenance.schemes import split_scheme_at
        from sediment.schemes.catalog import scheme_id_of

        return split_scheme_at(self.spec(), scheme_id_of(self, name), name)

