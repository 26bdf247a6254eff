"""Support shared by the tests and the benchmarks, never shipped (it lives outside ``src/``).

- :mod:`support.s3`: the loopback S3 fake (moto, serialised so conditional PUTs are atomic).
- :mod:`support.workload`: the benchmark workload's data (on ``sediment.workload``'s schema).
- :mod:`support.races`: forcing a race at one point (a gate holding a thread, a thread to hold).
- :mod:`support.internals`: test-only helpers over Sediment's internals (samples, sorted files,
  snapshot ranges, the leaf of a key).
- :mod:`support.merge_reference`: the merge rules (the ``merge`` table property) in pandas.
- :mod:`support.scrape`: scrapes of a process's metrics endpoint (``--metrics-port``).

Tests import it as ``support`` (``tests/`` is on ``sys.path``: tests/conftest.py); benchmarks
put ``tests/`` on ``sys.path`` in benchmarks/_common.py.
"""
