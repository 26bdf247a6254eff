"""Standard ingest: validate, buffer, sort, spill, partition, write, commit in one transaction."""

from sediment.ingest.standard import IngestResult, ingest, ingest_files

__all__ = ["IngestResult", "ingest", "ingest_files"]
