"""The transaction-log state store: log entries, content-addressed snapshots, history."""

from sediment.state.log import HistoryEntry, TransactionLog
from sediment.state.store import StateStore

__all__ = ["HistoryEntry", "StateStore", "TransactionLog"]
