"""Data files: the sorted Parquet writer with sidecar samples, range readers, k-way merge."""
