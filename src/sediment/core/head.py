"""Head: one read of a table's head, what an operation works from from start to end.

An operation (an ingest, a compaction pass, a maintenance pass or tick, a GC, a dump) reads the
head once, at its start, and passes this down: the state, its schema (never None: a state
without one is no initialised table), its typed settings and the compaction iterators they
configure. Nothing below the entry point reads the head again; a commit re-reads the log only
when another writer took the version it tried (``StateStore.commit``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sediment.core.state import TableState
from sediment.errors import CorruptMetadataError, PropertyError
from sediment.iterators.base import RecordIterator
from sediment.iterators.merge_rules import merge_rule
from sediment.iterators.registry import iterators_from_property
from sediment.schema import Schema
from sediment.settings import TableSettings, settings_of


@dataclass(frozen=True, slots=True)
class Head:
    """A state with what operations derive from it, derived once."""

    state: TableState
    schema: Schema
    settings: TableSettings
    compaction_iterators: tuple[RecordIterator, ...] | PropertyError
    """The iterators compaction runs: the merge rule (``merge``), then ``compaction.iterators``,
    checked against the schema; or
    why a stored setting cannot run (raised by :attr:`iterators`, where they are used: the
    steps that use none go on)."""
    name: str
    """The table's name (for errors and events)."""

    @property
    def iterators(self) -> tuple[RecordIterator, ...]:
        """The compaction iterators (PropertyError for a stored setting that cannot run)."""
        if isinstance(self.compaction_iterators, PropertyError):
            raise self.compaction_iterators
        return self.compaction_iterators

    @classmethod
    def of(cls, state: TableState, name: str) -> Head:
        """The head of table ``name`` at ``state`` (pure: no I/O).

        Raises CorruptMetadataError when the state has no schema (its log lacks the entry
        that initialised the table)."""
        schema = schema_of(state, name)
        settings = settings_of(state, name)
        iterators: tuple[RecordIterator, ...] | PropertyError
        try:
            rule = merge_rule(settings.merge, settings.merge_functions, schema,
                              where=f"table {name} property merge")
            iterators = (() if rule is None else (rule,)) + tuple(iterators_from_property(
                settings.compaction_iterators, schema,
                where=f"table {name} property compaction.iterators"))
        except PropertyError as e:
            iterators = e
        return cls(state, schema, settings, iterators, name)

    def moved_to(self, state: TableState) -> Head:
        """This head after a commit of this operation (``state``, the committed state):
        settings and iterators are kept unless the commit changed the properties."""
        if state.properties == self.state.properties and state.schema is self.schema:
            return Head(state, self.schema, self.settings, self.compaction_iterators,
                        self.name)
        return Head.of(state, self.name)


def schema_of(state: TableState, name: str) -> Schema:
    """The schema of an initialised table's state: the one place a state's optional schema
    is checked (CorruptMetadataError when it is missing: the log entry initialising the table
    is gone), so what an operation passes down never is optional."""
    if state.schema is None:
        raise CorruptMetadataError(f"table {name} has no schema at version {state.version}: "
                                   f"the log entry initialising it is missing")
    return state.schema
