"""The folders of tables no catalog entry names (dropped tables, with whatever late writers
left; a load or create killed before its catalog entry): found and removed once their newest
object is old enough by the object store's own clock (``Store.collect_unnamed_tables``, run by
whole-store maintenance once per pass)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import chain

from sediment.errors import CorruptMetadataError, ObjectNotFoundError
from sediment.state.documents import read_sealed
from sediment.storage.base import ObjectStore
from sediment.storage.clock import object_store_time

log = logging.getLogger(__name__)

CATALOG_PREFIX = "catalog/"
TABLES_PREFIX = "tables/"


@dataclass(frozen=True, slots=True)
class UnnamedTablesResult:
    """What :meth:`Store.collect_unnamed_tables` did."""

    removed: tuple[str, ...] = ()
    """Table ids whose folders were deleted."""
    waiting: tuple[str, ...] = ()
    """Unnamed folders not old enough yet."""
    objects_deleted: int = 0
    note: str = ""
    """Why nothing was collected, when something stood in the way."""


def named_table_ids(objects: ObjectStore, uri: str) -> set[str]:
    """Ids of the tables the catalog of the store at ``objects`` names (CorruptMetadataError
    when an entry cannot be read: then no folder can safely be called unnamed)."""
    ids: set[str] = set()
    for o in objects.list(CATALOG_PREFIX):
        if not o.key.endswith(".json"):
            continue
        where = f"catalog entry {o.key} of store {uri}"
        try:
            doc = read_sealed(objects, o.key, where)
        except ObjectNotFoundError:
            continue  # dropped since the listing
        try:
            ids.add(str(doc["table_id"]))
        except KeyError as e:
            raise CorruptMetadataError(f"{where} is corrupt: {e!r}") from e
    return ids


def collect_unnamed_tables(objects: ObjectStore, uri: str, timeout: float
                           ) -> UnnamedTablesResult:
    """Delete the folders ``tables/<id>/`` of the store at ``objects`` that no catalog entry
    names, once their newest object (temporaries included) is older than ``timeout`` seconds
    by the object store's clock (``Store.collect_unnamed_tables`` says more)."""
    folders = objects.list_folders(TABLES_PREFIX)
    if not folders:
        return UnnamedTablesResult()
    try:
        named = named_table_ids(objects, uri)
    except CorruptMetadataError as e:
        log.warning("not collecting unnamed table folders: %s", e)
        return UnnamedTablesResult(note=str(e))
    unnamed = [f for f in folders if f not in named]
    if not unnamed:
        return UnnamedTablesResult()
    now = object_store_time(objects)
    if now is None:
        note = f"the clock of store {uri} could not be read"
        return UnnamedTablesResult(waiting=tuple(unnamed), note=note)
    removed: list[str] = []
    waiting: list[str] = []
    deleted = 0
    for table_id in unnamed:
        prefix = f"{TABLES_PREFIX}{table_id}/"
        newest = max((o.mtime for o in chain(objects.list(prefix), objects.temporaries(prefix))),
                     default=None)
        if newest is not None and now - newest < timeout:
            waiting.append(table_id)
            continue
        deleted += objects.delete_folder(prefix)
        removed.append(table_id)
        log.info("removed the folder of unnamed table %s from store %s", table_id, uri)
    return UnnamedTablesResult(tuple(removed), tuple(waiting), deleted)
