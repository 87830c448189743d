"""End-offset observations (``bronze.end_offsets``): the optional input of consumer lag (docs/lag.md).

``__consumer_offsets`` says where each group is, not where each topic partition ends, so lag needs
a second input: observations of end offsets (the log end offset, i.e. the high watermark a
``read_uncommitted`` ListOffsets LATEST returns), from

* **files** (``end_offsets: {kind: file, paths: [...]}``): JSON lines or CSV with a header, fields
  ``cluster`` (optional: the source's), ``topic``, ``partition``, ``end_offset``, ``observed_at``
  (ISO-8601, a timezone-less one read as UTC, or epoch milliseconds) — read in bronze, small
  files parsed on the driver so a bad line is reported with its file and line number;
* the **Admin API** (``{kind: admin}``, kafka sources): ListOffsets LATEST for the topic partitions
  the lakehouse's live committed offsets reference, fetched by gold right before it computes lag
  (through the kafka-clients jar Spark's Kafka source puts in the JVM).

Rows are inserted with an insert-only MERGE on (cluster, topic, partition, observed_at): a file
read again, or a run re-run, adds nothing.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from pipelines.bronze.kafka_client import TIMEOUT_S, KafkaUnavailable, admin_client
from pipelines.errors import InputError, SourceNotFound
from pipelines.runtime import lake
from pipelines.runtime.config import EndOffsetsAdmin, EndOffsetsFile
from pipelines.runtime.files import filesystem

if TYPE_CHECKING:
    from pipelines.runtime.config import KafkaSource
    from pipelines.runtime.tables import Tables

log = logging.getLogger(__name__)

__all__ = ["KEY", "EndOffsetsResult", "Observation", "fetch_admin", "ingest_end_offsets", "read_files", "write"]

TABLE = "end_offsets"
KEY = ("cluster", "topic", "partition", "observed_at")
FIELDS = ("topic", "partition", "end_offset", "observed_at")


@dataclass(frozen=True)
class Observation:
    cluster: str
    topic: str
    partition: int
    end_offset: int
    observed_at: datetime
    source: str


@dataclass
class EndOffsetsResult:
    source_name: str
    kind: str
    observations: int = 0
    inserted: int = 0
    unknown_partitions: list[str] = field(default_factory=list)  # admin: partitions the broker did not answer for

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- files -------------------------------------------------------------------------------------------
def _expand(paths: list[str], base_dir: str) -> list[str]:
    """Absolute paths with local globs expanded; a path that matches nothing is an error."""
    out = []
    for p in paths:
        if "://" in p:
            out.append(p)
            continue
        p = p if p.startswith("/") else f"{base_dir}/{p}"
        found = sorted(glob.glob(p))
        if not found:
            raise SourceNotFound(f"end_offsets: no such file: {p}")
        out.extend(found)
    return out


def _timestamp(value: Any, where: str) -> datetime:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number or (isinstance(value, str) and value.isdigit()):
        return datetime.fromtimestamp(int(value) / 1000, timezone.utc)
    if isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
    raise InputError(f"{where}: observed_at: not an ISO-8601 timestamp or epoch milliseconds: {value!r}")


def _integer(value: Any, name: str, where: str) -> int:
    try:
        if isinstance(value, (bool, float)):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {name}: not an integer: {value!r}") from None
    if number < 0:
        raise InputError(f"{where}: {name}: negative: {number}")
    return number


def _observation(row: dict[str, Any], cluster: str, uri: str, where: str) -> Observation:
    missing = [f for f in FIELDS if row.get(f) in (None, "")]
    if missing:
        raise InputError(f"{where}: missing {', '.join(missing)}")
    return Observation(
        cluster=str(row.get("cluster") or cluster),
        topic=str(row["topic"]),
        partition=_integer(row["partition"], "partition", where),
        end_offset=_integer(row["end_offset"], "end_offset", where),
        observed_at=_timestamp(row["observed_at"], where),
        source=f"file:{uri}",
    )


def read_files(setting: EndOffsetsFile, cluster: str, base_dir: str) -> list[Observation]:
    """Every observation of the setting's files (parsed on the driver: snapshot files are small)."""
    out = []
    for uri in _expand(setting.paths, base_dir):
        fmt = setting.format or ("csv" if uri.endswith(".csv") else "jsonl")
        filesys, path = filesystem(uri)
        try:
            with filesys.open_input_stream(path) as stream:
                text = stream.read().decode("utf-8")
        except FileNotFoundError:
            raise SourceNotFound(f"end_offsets: no such file: {uri}") from None
        if fmt == "csv":
            reader = csv.DictReader(io.StringIO(text))
            missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{uri}: CSV header lacks {', '.join(missing)}")
            out += [_observation(row, cluster, uri, f"{uri}:{n + 2}") for n, row in enumerate(reader)]
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{uri}:{n}: not JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise InputError(f"{uri}:{n}: expected a JSON object")
            out.append(_observation(row, cluster, uri, f"{uri}:{n}"))
    return out


# -- the Admin API -----------------------------------------------------------------------------------
def fetch_admin(
    spark: SparkSession, source: KafkaSource, partitions: list[tuple[str, int]]
) -> tuple[list[Observation], list[str]]:
    """ListOffsets LATEST (read_uncommitted: the high watermark) for ``partitions``, now. Returns the
    observations and the partitions without one (a deleted topic, a partition the broker answered
    with an error): their end offset stays unknown."""
    if not partitions:
        return [], []
    with admin_client(spark, source, "offsets-lakehouse-end-offsets") as admin:
        return _list_offsets(spark._jvm, admin, source, partitions)  # type: ignore[attr-defined]


def _list_offsets(
    jvm: Any, admin: Any, source: KafkaSource, partitions: list[tuple[str, int]]
) -> tuple[list[Observation], list[str]]:
    where = f"Kafka at {source.bootstrap_servers}"
    unit = jvm.java.util.concurrent.TimeUnit.SECONDS
    # ListOffsets retries an unknown topic until its timeout: ask only for topics that exist
    listing = jvm.org.apache.kafka.clients.admin.ListTopicsOptions().listInternal(True)
    existing = set(admin.listTopics(listing).names().get(TIMEOUT_S, unit))
    # a topic the principal may not DESCRIBE is left out of the listing like one that does not exist
    unknown = [f"{t}-{p}: no such topic, or no DESCRIBE ACL on it" for t, p in partitions if t not in existing]
    latest = jvm.org.apache.kafka.clients.admin.OffsetSpec.latest()
    wanted = jvm.java.util.HashMap()
    tps = {}
    for topic, part in partitions:
        if topic not in existing:
            continue
        tp = jvm.org.apache.kafka.common.TopicPartition(topic, part)
        tps[(topic, part)] = tp
        wanted.put(tp, latest)
    answer = admin.listOffsets(wanted)
    ends, timeouts = [], 0
    for (topic, part), tp in sorted(tps.items()):
        try:
            info = answer.partitionResult(tp).get(TIMEOUT_S, unit)
        except Py4JJavaError as exc:
            cause = exc.java_exception
            cause = cause.getCause() or cause  # get() wraps the error in an ExecutionException
            name = cause.getClass().getSimpleName()
            timeouts += name == "TimeoutException"
            unknown.append(f"{topic}-{part}: {name}")
            continue
        ends.append((topic, part, int(info.offset())))
    if tps and timeouts == len(tps):  # not one answer: the cluster is unreachable, not a partition unknown
        raise KafkaUnavailable(f"{where}: TimeoutException: ListOffsets did not answer in {TIMEOUT_S} s")
    # one moment for the whole answer (ListOffsets is one request per leader, sent at once)
    at = datetime.now(timezone.utc)
    origin = f"admin:{source.bootstrap_servers}"
    return [Observation(source.cluster, t, p, end, at, origin) for t, p, end in ends], unknown


# -- writing -----------------------------------------------------------------------------------------
def write(spark: SparkSession, tables: Tables, rows: list[Observation], source_name: str, run_id: str) -> int:
    """Insert the observations not yet in ``bronze.end_offsets``; returns how many were new.

    The new ones are found on the driver (the table's keys at or after the earliest observation,
    read by delta-rs) and appended in one commit: a run of a job is the only writer of its
    cluster's rows (the job lock), so nothing can insert them meanwhile. Spark's insert-only MERGE
    when delta-rs cannot read the table."""
    tables.ensure("bronze", TABLE)
    if not rows:
        return 0
    path = tables.path("bronze", TABLE)
    # one observation per key within the input too (a file listed twice, a line repeated)
    unique = list({_key(o): o for o in rows}.values())
    new = _not_yet_in(path, unique)
    if new is None:
        frame = lake.spark_frame(spark, _arrow(tables, unique, source_name, run_id))
        return lake.insert_new(spark, path, frame, KEY)
    if new:
        table = _arrow(tables, new, source_name, run_id)
        lake.write_rows(spark, table, path, tables.spec("bronze", TABLE).struct())
    return len(new)


def _key(o: Observation) -> tuple[str, str, int, datetime]:
    return o.cluster, o.topic, o.partition, o.observed_at


def _not_yet_in(path: str, rows: list[Observation]) -> list[Observation] | None:
    """The observations whose key the table does not hold; None when delta-rs cannot read it."""
    earliest = min(o.observed_at for o in rows)
    clusters = sorted({o.cluster for o in rows})
    try:
        held = lake.read_arrow_where(
            path,
            KEY,
            (ds.field("observed_at") >= pa.scalar(earliest, pa.timestamp("us", tz="UTC")))
            & ds.field("cluster").isin(clusters),
        )
    except Exception as exc:
        log.debug("delta-rs cannot read %s (%s): Spark merges the observations", path, exc)
        return None
    seen = set(zip(*(held[k].to_pylist() for k in KEY), strict=True))
    return [o for o in rows if _key(o) not in seen]


def _arrow(tables: Tables, rows: list[Observation], source_name: str, run_id: str) -> pa.Table:
    now = datetime.now(timezone.utc)
    data = {
        "cluster": [o.cluster for o in rows],
        "topic": [o.topic for o in rows],
        "partition": [o.partition for o in rows],
        "end_offset": [o.end_offset for o in rows],
        "observed_at": [o.observed_at for o in rows],
        "source": [o.source for o in rows],
        "source_name": [source_name] * len(rows),
        "run_id": [run_id] * len(rows),
        "ingested_at": [now] * len(rows),
    }
    return pa.table(data, tables.spec("bronze", TABLE).arrow())


def ingest_end_offsets(
    spark: SparkSession, tables: Tables, name: str, source: Any, run_id: str, base_dir: str
) -> EndOffsetsResult | None:
    """Bronze's part: a source's end-offset files (``kind: file``). ``kind: admin`` is fetched by
    gold, which knows the partitions the live offsets reference (None here)."""
    setting = source.end_offsets
    if not isinstance(setting, EndOffsetsFile):
        return None
    result = EndOffsetsResult(name, "file")
    rows = read_files(setting, source.cluster, base_dir)
    result.observations = len(rows)
    result.inserted = write(spark, tables, rows, name, run_id)
    return result


def admin_sources(sources: dict[str, Any], names: list[str]) -> dict[str, KafkaSource]:
    """The job's sources whose end offsets are fetched with the Admin API."""
    return {n: sources[n] for n in names if isinstance(sources[n].end_offsets, EndOffsetsAdmin)}
