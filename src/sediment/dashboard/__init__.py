"""The web dashboard: a read-only view of a Store's tables, partitions, files and jobs."""
