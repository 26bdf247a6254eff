"""The Spark stream source's pure parts (sediment.spark.stream_offsets), without Spark: its
offsets, its options, how much a micro-batch admits and how a batch's versions are cut into
tasks."""

from __future__ import annotations

import pytest

from sediment.errors import QueryError
from sediment.spark.stream_offsets import (
    PIN_TTL_SECONDS,
    StreamOffset,
    VersionWeight,
    admit,
    group_versions,
    stream_options,
)

S = "abc"


def _w(*sizes: int | None, first: int = 1) -> list[VersionWeight]:
    """Weights of consecutive versions from ``first``: a size, or None for a version that
    changes no record (a compaction)."""
    return [VersionWeight(first + i, size or 0, size is not None)
            for i, size in enumerate(sizes)]


def test_offsets_round_trip_and_refuse_what_this_source_never_wrote() -> None:
    o = StreamOffset(S, 7, True)
    assert list(o.to_json()) == ["stream", "version", "snapshot"]  # one text per offset
    assert StreamOffset.from_json(o.to_json(), "t") == o
    for bad in ({"version": 3}, {"stream": S, "version": -1}, {"stream": S, "version": True},
                {"stream": S, "version": "3"}, [3], {"offset": 5}):
        with pytest.raises(QueryError, match="table t: the checkpoint holds offset .* not a "
                                             "sediment stream offset"):
            StreamOffset.from_json(bad, "t")


def test_admission_without_limits_reaches_the_end() -> None:
    assert admit(StreamOffset(S, 0), _w(5, None, 7), 0, None, None) == StreamOffset(S, 3)
    assert admit(StreamOffset(S, 4), [], 0, None, None) == StreamOffset(S, 4)
    # the pending content is a unit of its own, admitted even with nothing after it
    assert admit(StreamOffset(S, 4, True), [], 10**9, 1, 1) == StreamOffset(S, 4)


def test_admission_takes_whole_versions_and_the_limits_are_soft() -> None:
    w = _w(4, 4, 50, 4, 4)
    assert admit(StreamOffset(S, 0), w, 0, 10, None).version == 2
    assert admit(StreamOffset(S, 2), w[2:], 0, 10, None).version == 3  # one huge version, whole
    assert admit(StreamOffset(S, 3), w[3:], 0, 10, None).version == 5
    assert admit(StreamOffset(S, 0), w, 0, None, 2).version == 2
    assert admit(StreamOffset(S, 0), w, 0, 100, 4).version == 4  # both limits hold
    assert admit(StreamOffset(S, 0), w, 0, 3, None).version == 1  # first version whatever it weighs
    # the content counts as one version with its records
    assert admit(StreamOffset(S, 0, True), w, 8, 10, None) == StreamOffset(S, 0)
    assert admit(StreamOffset(S, 0, True), w, 2, None, 2) == StreamOffset(S, 1)


def test_versions_that_change_no_record_count_for_no_limit() -> None:
    w = _w(4, None, None, 4, None, 4)
    # compactions ride along up to the next data version that does not fit
    assert admit(StreamOffset(S, 0), w, 0, None, 1).version == 3
    assert admit(StreamOffset(S, 0), w, 0, None, 2).version == 5
    assert admit(StreamOffset(S, 0), _w(None, None), 0, 1, 1).version == 2


def test_a_batch_is_cut_into_whole_version_ranges_of_data_versions_only() -> None:
    # ten small versions: at least eight ranges, so tasks read in parallel
    ranges = group_versions(_w(*[1] * 10), 1_000_000)
    assert len(ranges) >= 8
    covered = [v for a, b in ranges for v in range(a + 1, b + 1)]
    assert covered == list(range(1, 11))
    # a range never exceeds the target unless one version alone does
    assert group_versions(_w(3, 3, 10, 3, first=5), 6, parts=1) == [(4, 6), (6, 7), (7, 8)]
    # versions that change nothing need no task; a range may span them
    assert group_versions(_w(None, 2, None, None, 2, None), 10, parts=1) == [(1, 5)]
    assert group_versions(_w(None, None), 10) == []


def test_options_are_checked_naming_the_table_and_the_option() -> None:
    o = stream_options({"table": "t"})
    assert (o.starting, o.change_feed, o.ignore_deletes, o.pin) == (None, False, False, True)
    assert o.pin_ttl_seconds == PIN_TTL_SECONDS
    assert stream_options({"table": "t", "startingVersion": "12"}).starting == 12
    assert stream_options({"table": "t", "startingVersion": "LATEST"}).starting == "latest"
    assert stream_options({"table": "t", "startingVersion": "nightly"}).starting == "nightly"
    o = stream_options({"table": "t", "maxRecordsPerTrigger": "5", "readChangeFeed": "True",
                        "maxVersionsPerTrigger": "2", "pinTtlSeconds": "60"})
    assert (o.max_records, o.max_versions, o.change_feed, o.pin_ttl_seconds) == (5, 2, True, 60)
    for name, value, what in [
            ("startingVersion", "-3", "not a version number, a tag name or latest"),
            ("startingVersion", "", "not a version number"),
            ("maxRecordsPerTrigger", "-1", "not a positive whole number"),
            ("maxVersionsPerTrigger", "0", "not a positive whole number"),
            ("maxVersionsPerTrigger", "1.5", "not a positive whole number"),
            ("readChangeFeed", "yes", "not true or false"),
            ("pinTtlSeconds", "-5", "not a positive number of seconds"),
            ("pinTtlSeconds", "inf", "not a positive number of seconds")]:
        with pytest.raises(QueryError, match=f"on table t: option {name}={value!r} is {what}"):
            stream_options({"table": "t", name: value})
    with pytest.raises(QueryError, match="on table t: option version is for batch reads"):
        stream_options({"table": "t", "version": "3"})
