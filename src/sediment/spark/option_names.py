"""The option names the sediment data source takes, by what it is asked to do.

Spark hands a data source every ``.option()`` it was given, whatever the name: one misspelt
and ignored changes the job without a word (``wirte=upsert`` appended duplicates,
``startingVersoin=latest`` streamed the whole table, ``verison=2`` read the head). So a name
the role does not take is refused, naming the closest one it does. Names are compared in
lower case: Spark's option map is case-insensitive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sediment.errors import QueryError, did_you_mean
from sediment.spark.stream_offsets import BATCH_ONLY, STREAM_OPTIONS
from sediment.spark.tasks import _STORE_OPTIONS, TRUST_OPTION

STORE = ("store", *_STORE_OPTIONS, "table", TRUST_OPTION)
"""Where the table is (sediment.spark.tasks.options_spec) and which iterators its workers
may load."""
SPARK = ("path", "checkpointLocation")
"""Options Spark itself may set for a source or sink (a ``load(path)``; a stream's
checkpoint, which the sink reads its identity from)."""
READ = ("columns", *BATCH_ONLY)
STREAM_READ = STREAM_OPTIONS
WRITE = ("write",)
STREAM_WRITE = ("write", "streamId")

ROLES: dict[str, tuple[str, ...]] = {
    # a read's options are checked at load(), before Spark says whether it is a batch read
    # or a stream: the two share a check, and each then refuses the other's options by name
    "read": (*STORE, *SPARK, *READ, *STREAM_READ),
    "write": (*STORE, *SPARK, *WRITE),
    "stream write": (*STORE, *SPARK, *STREAM_WRITE),
}


def check_option_names(options: Mapping[str, str], role: str) -> None:
    """QueryError naming the first option of ``options`` that a ``role`` (``read``,
    ``write``, ``stream write``) of the data source does not take."""
    known = ROLES[role]
    lower = {n.lower(): n for n in known}
    for name in options:
        if str(name).lower() not in lower:
            # (Spark lower-cases the names it hands over: the hint names the option as
            # documented)
            hint = did_you_mean(str(name).lower(), lower)
            for low, proper in lower.items():
                hint = hint.replace(repr(low), repr(proper))
            raise QueryError(
                f"the sediment data source ({role} of table {options.get('table')}): unknown "
                f"option {name!r}{hint}; a {role} takes {_listed(known)}")


def _listed(names: Iterable[str]) -> str:
    return ", ".join(n for n in names if n not in SPARK)
