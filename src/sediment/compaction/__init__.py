"""Compaction: pure job planning (strategies), job execution (merge), and the local runner."""
