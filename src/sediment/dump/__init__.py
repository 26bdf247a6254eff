"""Bulk dump (a key range at one version, to folders with data, sample and manifest files) and
bulk load (verify, then add the dumped files to a new or existing table in one transaction)."""

from sediment.dump.dump import DumpJob, dump_table
from sediment.dump.load import KeyedLoad, Loaded, VerifiedDump, open_dump

__all__ = ["DumpJob", "KeyedLoad", "Loaded", "VerifiedDump", "dump_table", "open_dump"]
