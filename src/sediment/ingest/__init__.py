"""Ingest. ``standard``: validate, buffer, sort, spill, partition, write, commit in one
transaction; ``sources``: the files and formats ``ingest_files`` reads; ``batcher``: file-ingest
requests grouped into jobs, each run by standard ingest or Spark bulk import."""

from sediment.ingest.standard import IngestResult, ingest, ingest_files

__all__ = ["IngestResult", "ingest", "ingest_files"]
