"""Kafka's own decoder as a test oracle: run ``kafka.tools.DumpLogSegments --offsets-decoder``,
parse its text output strictly, and compare it with ``offsets-lakehouse inspect --records``.

Output format of DumpLogSegments (Kafka 4.2.1) is documented in docs/kafka-dumplog-format.md.
Everything here is independent of ``pipelines`` (our decoder) on purpose.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- running the tool


class DumpLogSegmentsError(RuntimeError):
    pass


def shared_dir() -> Path:
    """The shared test-data directory (``$OFFSETS_SHARED_DIR``, default ``<repo>/../shared``)."""
    env = os.environ.get("OFFSETS_SHARED_DIR")
    return Path(env) if env else (REPO / ".." / "shared").resolve()


def kafka_libs_dir() -> Path:
    out = subprocess.run([str(REPO / "scripts" / "kafka-jars")], check=True, capture_output=True, text=True)
    libs = Path(out.stdout.strip().splitlines()[-1])
    if not libs.is_dir():
        raise DumpLogSegmentsError(f"scripts/kafka-jars printed {libs!r}, not a directory")
    return libs


def _chunks(files: Sequence[Path], max_chars: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for f in files:
        s = str(f)
        if "," in s:
            raise ValueError(f"DumpLogSegments --files is comma separated; cannot pass {s!r}")
        if chunk and size + len(s) + 1 > max_chars:
            yield chunk
            chunk, size = [], 0
        chunk.append(s)
        size += len(s) + 1
    if chunk:
        yield chunk


def run_dump_log_segments(files: Sequence[Path], *, max_chars: int = 60_000, libs: Path | None = None) -> Iterator[str]:
    """Stream DumpLogSegments' stdout lines (without newline) for ``files``.

    One JVM per chunk of files (``--files`` is a single comma-separated argument; chunks keep it
    under ``max_chars``). Raises DumpLogSegmentsError if a JVM exits non-zero (the tool aborts on
    e.g. a record without key or a zero-filled tail), with the end of its stderr.
    """
    libs = libs or kafka_libs_dir()
    for chunk in _chunks(list(files), max_chars):
        cmd = [
            "java",
            "-Dfile.encoding=UTF-8",
            "-Dstdout.encoding=UTF-8",
            "-Dsun.stdout.encoding=UTF-8",
            "-cp",
            f"{libs}/*",
            "kafka.tools.DumpLogSegments",
            "--deep-iteration",
            "--print-data-log",
            "--offsets-decoder",
            "--files",
            ",".join(chunk),
        ]
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, encoding="utf-8")
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    yield line.rstrip("\n")
            finally:
                proc.stdout.close()
                rc = proc.wait()
            if rc != 0:
                err.seek(0)
                tail = [ln for ln in err.read().decode("utf-8", "replace").splitlines() if not ln.startswith("SLF4J:")][
                    :15
                ]
                raise DumpLogSegmentsError(f"DumpLogSegments exited {rc} on {len(chunk)} file(s):\n" + "\n".join(tail))


# ---------------------------------------------------------------- parsing its output

_TS = r"(?P<ts_type>CreateTime|LogAppendTime|NoTimestampType): (?P<ts>-?\d+)"
_BATCH_TAIL = (
    r" position: (?P<position>\d+) "
    + _TS.replace("ts", "bts")
    + r" size: (?P<size>\d+) magic: (?P<magic>\d) compresscodec: (?P<codec>\w+)"
    r" crc: (?P<crc>\d+) isvalid: (?P<isvalid>true|false)$"
)
_BATCH_V2 = re.compile(
    r"^baseOffset: (?P<baseOffset>-?\d+) lastOffset: (?P<lastOffset>-?\d+) count: (?P<count>\d+)"
    r" baseSequence: (?P<baseSequence>-?\d+) lastSequence: (?P<lastSequence>-?\d+)"
    r" producerId: (?P<producerId>-?\d+) producerEpoch: (?P<producerEpoch>-?\d+)"
    r" partitionLeaderEpoch: (?P<partitionLeaderEpoch>-?\d+) isTransactional: (?P<isTransactional>true|false)"
    r" isControl: (?P<isControl>true|false) deleteHorizonMs: (?P<deleteHorizonMs>OptionalLong\.empty|"
    r"OptionalLong\[-?\d+\])" + _BATCH_TAIL
)
_BATCH_LEGACY = re.compile(r"^offset: (?P<lastOffset>-?\d+)" + _BATCH_TAIL)
_RECORD_HEAD = re.compile(
    r"^\| offset: (?P<offset>-?\d+) " + _TS + r" keySize: (?P<keySize>-?\d+) valueSize: (?P<valueSize>-?\d+)"
    r"(?: sequence: (?P<sequence>-?\d+) headerKeys: \[(?P<headerKeys>[^\]]*)\]"
    r"| isValid: (?P<isValid>true|false) crc: (?P<crc>\d+)\})"
)
_END_TXN = re.compile(r"^ endTxnMarker: (?P<type>COMMIT|ABORT) coordinatorEpoch: (?P<epoch>-?\d+)$")
_CONTROL_OTHER = re.compile(r"^ controlType: (?P<name>\w+)\((?P<id>-?\d+)\)$")
_KRAFT_CONTROL = re.compile(
    r"^ (?P<name>LeaderChange|SnapshotHeader|SnapshotFooter|KRaftVersion|KRaftVoters) (?P<json>\{.*\})$"
)
_UNKNOWN = re.compile(r"^ key: Unknown record type (?P<type>-?\d+) at offset (?P<offset>-?\d+), skipping\.$")
_ERROR = re.compile(r"^ key: Error at offset (?P<offset>-?\d+), skipping\. (?P<msg>.*)$")
_TRAILING = re.compile(r"^Found (?P<n>\d+) invalid bytes at the end of (?P<name>.+)$")
# "LeaderChange" text is assumed (not observed); types 2-6 are KRaft-only and never in __consumer_offsets.
_KRAFT_IDS = {"LeaderChange": 2, "SnapshotHeader": 3, "SnapshotFooter": 4, "KRaftVersion": 5, "KRaftVoters": 6}
_JSON = json.JSONDecoder()


class DumpParseError(ValueError):
    pass


def _int_or_none(s: str | None) -> int | None:
    return None if s is None else int(s)


def _batch_fields(m: re.Match[str], legacy: bool) -> dict[str, Any]:
    g = m.groupdict()
    b: dict[str, Any] = {
        "position": int(g["position"]),
        "magic": int(g["magic"]),
        "compresscodec": g["codec"],
        "size": int(g["size"]),
        "crc": int(g["crc"]),
        "isvalid": g["isvalid"] == "true",
        "batchTimestampType": g["bts_type"],
        "maxTimestamp": int(g["bts"]),
        "lastOffset": int(g["lastOffset"]),
    }
    if legacy:  # magic 0/1: one top-level message (possibly a compressed wrapper)
        b.update(
            baseOffset=None,
            count=None,
            isTransactional=False,
            isControl=False,
            producerId=-1,
            producerEpoch=-1,
            partitionLeaderEpoch=None,
            baseSequence=-1,
            deleteHorizonMs=None,
        )
    else:
        dh = g["deleteHorizonMs"]
        b.update(
            baseOffset=int(g["baseOffset"]),
            count=int(g["count"]),
            isTransactional=g["isTransactional"] == "true",
            isControl=g["isControl"] == "true",
            producerId=int(g["producerId"]),
            producerEpoch=int(g["producerEpoch"]),
            partitionLeaderEpoch=int(g["partitionLeaderEpoch"]),
            baseSequence=int(g["baseSequence"]),
            deleteHorizonMs=None if dh == "OptionalLong.empty" else int(dh[len("OptionalLong[") : -1]),
        )
    return b


def _parse_record_rest(rest: str, rec: dict[str, Any], where: str) -> None:
    """Fill key/payload (or control) fields of ``rec`` from the text after the record header."""
    rec.update(
        control_type=None,
        control_type_id=None,
        coordinator_epoch=None,
        control_json=None,
        record_type=None,
        key=None,
        payload=None,
        tombstone=rec["valueSize"] == -1,
        value_version=None,
        value=None,
        unknown_type=False,
        error=None,
    )
    if rec["isControl"]:
        if m := _END_TXN.match(rest):
            rec.update(
                control_type=m["type"],
                control_type_id=1 if m["type"] == "COMMIT" else 0,
                coordinator_epoch=int(m["epoch"]),
            )
        elif m := _CONTROL_OTHER.match(rest):
            rec.update(control_type=m["name"], control_type_id=int(m["id"]))
        elif m := _KRAFT_CONTROL.match(rest):
            rec.update(
                control_type=m["name"], control_type_id=_KRAFT_IDS[m["name"]], control_json=json.loads(m["json"])
            )
        else:
            raise DumpParseError(f"{where}: unrecognised control record text {rest!r}")
        rec["tombstone"] = False
        return
    if m := _UNKNOWN.match(rest):
        if int(m["offset"]) != rec["offset"]:
            raise DumpParseError(f"{where}: offset mismatch in {rest!r}")
        rec.update(record_type=int(m["type"]), unknown_type=True)
        return
    if m := _ERROR.match(rest):
        if int(m["offset"]) != rec["offset"]:
            raise DumpParseError(f"{where}: offset mismatch in {rest!r}")
        rec["error"] = m["msg"]
        return
    if not rest.startswith(" key: {"):
        raise DumpParseError(f"{where}: unrecognised record text {rest!r}")
    try:
        key, end = _JSON.raw_decode(rest, len(" key: "))
    except json.JSONDecodeError as e:
        raise DumpParseError(f"{where}: bad key JSON: {e}") from e
    tail = rest[end:]
    if not tail.startswith(" payload: "):
        raise DumpParseError(f"{where}: expected ' payload: ' after the key, got {tail[:60]!r}")
    ptext = tail[len(" payload: ") :]
    if ptext == "<DELETE>":
        payload = None
        if rec["valueSize"] != -1:
            raise DumpParseError(f"{where}: <DELETE> with valueSize {rec['valueSize']}")
    else:
        try:
            payload, pend = _JSON.raw_decode(ptext)
        except json.JSONDecodeError as e:
            raise DumpParseError(f"{where}: bad payload JSON: {e}") from e
        if pend != len(ptext):
            raise DumpParseError(f"{where}: trailing text after payload: {ptext[pend:][:60]!r}")
        if rec["valueSize"] == -1:
            raise DumpParseError(f"{where}: payload printed for valueSize -1")
        if set(payload) != {"version", "data"} or not isinstance(payload["data"], dict):
            raise DumpParseError(f"{where}: unexpected payload shape {ptext[:80]!r}")
        rec["value_version"] = int(payload["version"])
        rec["value"] = payload["data"]
    if set(key) != {"type", "data"} or not isinstance(key["data"], dict):
        raise DumpParseError(f"{where}: unexpected key shape {rest[:80]!r}")
    rec.update(record_type=int(key["type"]), key=key["data"], payload=payload)


def parse_dump(lines: Iterable[str], files_info: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Parse DumpLogSegments output into one dict per record (strict: any unknown line raises).

    Record dict: ``file`` (as printed), the batch fields under Kafka's names (``baseOffset``,
    ``lastOffset``, ``count``, ``position``, ``magic``, ``compresscodec``, ``isTransactional``,
    ``isControl``, ``producerId``, ``producerEpoch``, ``partitionLeaderEpoch``, ``baseSequence``,
    ``deleteHorizonMs``, ``size``, ``crc``, ``isvalid``; legacy magic 0/1 entries get
    ``baseOffset``/``count``/``partitionLeaderEpoch`` None and producer fields -1), ``offset``,
    ``timestamp``, ``timestamp_type`` (``CreateTime``/``LogAppendTime``/``NoTimestampType``),
    ``keySize``, ``valueSize``, ``sequence``, ``headerKeys`` (v2 only), and the decoded part:
    ``control_type``/``control_type_id``/``coordinator_epoch`` for control records; otherwise
    ``record_type`` (int), ``key`` (Kafka JSON ``data``), ``tombstone``, ``value_version``,
    ``value`` (Kafka JSON ``data``, None for tombstones), ``unknown_type`` (Kafka printed
    "Unknown record type N") and ``error`` (Kafka's message for "Error at offset ..."; key/value
    are then unknown).

    If ``files_info`` is given it is filled per printed file with ``batches``, ``records`` and
    ``invalid_trailing_bytes`` (Kafka's "Found N invalid bytes at the end of ..." line).
    """
    records: list[dict[str, Any]] = []
    info = files_info if files_info is not None else {}
    file: str | None = None
    batch: dict[str, Any] | None = None
    for lineno, line in enumerate(lines, 1):
        where = f"line {lineno}"
        if line.startswith("SLF4J:"):
            continue
        if line.startswith("Dumping "):
            file = line[len("Dumping ") :]
            batch = None
            info[file] = {"batches": 0, "records": 0, "invalid_trailing_bytes": 0, "start_offset": None}
            continue
        if file is None:
            raise DumpParseError(f"{where}: output before the first 'Dumping' line: {line!r}")
        if line.startswith("Log starting offset: "):
            info[file]["start_offset"] = int(line.split(": ", 1)[1])
            continue
        if (m := _BATCH_V2.match(line)) or (m := _BATCH_LEGACY.match(line)):
            batch = _batch_fields(m, legacy=line.startswith("offset: "))
            info[file]["batches"] += 1
            continue
        if m := _TRAILING.match(line):
            if m["name"] != Path(file).name:
                raise DumpParseError(f"{where}: trailing-bytes line for another file: {line!r}")
            info[file]["invalid_trailing_bytes"] = int(m["n"])
            continue
        if m := _RECORD_HEAD.match(line):
            if batch is None:
                raise DumpParseError(f"{where}: record line before any batch line")
            legacy = batch["magic"] < 2
            if legacy != (m["isValid"] is not None):
                raise DumpParseError(f"{where}: record line shape does not match magic {batch['magic']}")
            rec: dict[str, Any] = {
                "file": file,
                **batch,
                "offset": int(m["offset"]),
                "timestamp": int(m["ts"]),
                "timestamp_type": m["ts_type"],
                "keySize": int(m["keySize"]),
                "valueSize": int(m["valueSize"]),
                "sequence": _int_or_none(m["sequence"]),
                "headerKeys": None if legacy else [h for h in m["headerKeys"].split(",") if h],
                "recordCrc": _int_or_none(m["crc"]),
                "recordIsValid": None if m["isValid"] is None else m["isValid"] == "true",
            }
            _parse_record_rest(line[m.end() :], rec, f"{where} ({file} offset {rec['offset']})")
            records.append(rec)
            info[file]["records"] += 1
            continue
        raise DumpParseError(f"{where}: unrecognised line {line[:200]!r}")
    return records


# ---------------------------------------------------------------- canonical form

# Record types Kafka 4.2.1's GroupCoordinatorRecordSerde knows (9 and 18 print "Unknown record type").
KAFKA_KNOWN_TYPES = frozenset(range(24)) - {9, 18}
# Record types in the spec's table (what our decoder is expected to decode).
SPEC_TYPES = frozenset(range(24))


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _snake_all(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {snake(k): _snake_all(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_snake_all(v) for v in obj]
    return obj


def _canonical_record(**kw: Any) -> dict[str, Any]:
    rec = {k: kw.get(k) for k in CANONICAL_FIELDS}
    if rec["error"]:
        # Kafka prints only "Error at offset N, skipping. <message>" for a record it cannot decode, so
        # nothing but the fact of the failure (and the envelope) is comparable.
        rec.update(record_type=None, key=None, value_version=None, value=None, unknown_type=False)
    elif rec["unknown_type"]:
        rec.update(key=None, value_version=None, value=None)  # Kafka prints only the type id
    return rec


CANONICAL_FIELDS = (
    "file",
    "offset",
    "batch_position",
    "magic",
    "codec",
    "timestamp",
    "timestamp_type",
    "transactional",
    "producer_id",
    "producer_epoch",
    "control",
    "control_type",
    "control_type_id",
    "coordinator_epoch",
    "record_type",
    "unknown_type",
    "error",
    "key",
    "tombstone",
    "value_version",
    "value",
)


def _resolve(file: str) -> str:
    return str(Path(file).resolve())


def canonical_from_kafka(rec: dict[str, Any]) -> dict[str, Any]:
    """Common comparison form of one ``parse_dump`` record (snake_case names, see CANONICAL_FIELDS)."""
    no_ts = rec["timestamp_type"] == "NoTimestampType"
    value = _snake_all(rec["value"]) if rec["value"] is not None else None
    # Type 2: Kafka replaces members[].subscription/assignment (base64 bytes) by the decoded
    # consumer-protocol structure when protocolType == "consumer" and the bytes decode; a string
    # means the raw bytes (base64). _snake_all already turned the decoded dicts' names to snake_case.
    return _canonical_record(
        file=_resolve(rec["file"]),
        offset=rec["offset"],
        batch_position=rec["position"],
        magic=rec["magic"],
        codec=rec["compresscodec"],
        timestamp=None if no_ts else rec["timestamp"],
        timestamp_type=None if no_ts else rec["timestamp_type"],
        transactional=rec["isTransactional"],
        producer_id=rec["producerId"],
        producer_epoch=rec["producerEpoch"],
        control=rec["isControl"],
        control_type=rec["control_type"],
        control_type_id=rec["control_type_id"],
        coordinator_epoch=rec["coordinator_epoch"],
        record_type=rec["record_type"],
        unknown_type=rec["unknown_type"],
        error=rec["error"] is not None,
        key=_snake_all(rec["key"]) if rec["key"] is not None else None,
        tombstone=rec["tombstone"],
        value_version=rec["value_version"],
        value=value,
    )


def _member_from_ours(member: dict[str, Any]) -> dict[str, Any]:
    m = dict(member)
    for field in ("subscription", "assignment"):
        info = m.pop(f"{field}_info", None)
        if info is not None:
            info = dict(info)
            # Kafka's JSON of the decoded structure carries no version (it is implied by which
            # fields are printed); fields our decoder materialises for older versions are handled
            # by the "absent-field-default" accepted difference.
            info.pop("version", None)
            m[field] = info
    return m


def canonical_from_ours(line: dict[str, Any]) -> dict[str, Any]:
    """Common comparison form of one ``inspect --records`` JSON line (docs/inspect-records.md)."""
    control = bool(line["control"])
    undecodable = line.get("status") == "undecodable"
    rtype = line.get("record_type")
    unknown = not control and rtype is not None and rtype not in SPEC_TYPES
    value = line.get("value")
    if value is not None and rtype == 2 and isinstance(value.get("members"), list):
        value = {**value, "members": [_member_from_ours(m) for m in value["members"]]}
    return _canonical_record(
        file=_resolve(line["file"]),
        offset=line["offset"],
        batch_position=line["batch_position"],
        magic=line["magic"],
        codec=line["codec"],
        timestamp=line["timestamp"],
        timestamp_type=line["timestamp_type"],
        transactional=line["transactional"],
        producer_id=line["producer_id"],
        producer_epoch=line["producer_epoch"],
        control=control,
        control_type=line.get("control_type") if control else None,
        control_type_id=line.get("control_type_id") if control else None,
        coordinator_epoch=line.get("coordinator_epoch") if control else None,
        record_type=None if control else rtype,
        unknown_type=unknown,
        error=undecodable and not unknown,
        key=None if control else line.get("key"),
        tombstone=False if control else bool(line.get("tombstone")),
        value_version=None if control else line.get("value_version"),
        value=None if control else value,
    ) | {"layout": line.get("layout")}  # not compared; used by the "historical-layout" acceptance


# ---------------------------------------------------------------- accepted differences

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
_ABSENT = object()

# Declared defaults (spec §2.4, §4-9 and the Kafka schemas) of fields that Kafka's JSON converter
# leaves out: fields that do not exist in the record's version, and tagged fields equal to their
# default. Keyed by the snake_case field name; only these names are accepted.
FIELD_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "leader_epoch": (-1,),
    "expire_timestamp": (-1,),
    "topic_id": (ZERO_UUID,),  # types 0/1
    "current_state_timestamp": (-1,),
    "rebalance_timeout": (-1,),
    "group_instance_id": (None,),  # type 2
    "owned_partitions": ([],),
    "generation_id": (-1,),
    "rack_id": (None,),  # subscription
    "metadata_hash": (0,),
    "classic_member_metadata": (None,),
    "assignment_epochs": (None,),
    "validated_topology_epoch": (-1,),
    "last_assignment_configs": (None,),
    "assignment_timestamp": (0,),
    "stored_description_topology_epoch": (-1,),
    "failed_description_topology_epoch": (-1,),
}


@dataclass(frozen=True)
class Difference:
    file: str
    offset: int
    path: str
    kafka: Any
    ours: Any
    kafka_rec: dict[str, Any] | None
    our_rec: dict[str, Any] | None

    def __str__(self) -> str:
        def show(v: Any) -> str:
            return "<absent>" if v is _ABSENT else json.dumps(v, default=str)[:200]

        return f"{self.file} @{self.offset} {self.path}: kafka={show(self.kafka)} ours={show(self.ours)}"

    @property
    def field(self) -> str:
        """The path with list indices written ``[]``: ``value.members[].group_instance_id``."""
        return re.sub(r"\[\d+\]", "[]", self.path)

    @property
    def record_type(self) -> int | None:
        rec = self.our_rec or self.kafka_rec
        return rec["record_type"] if rec else None

    @property
    def value_version(self) -> int | None:
        rec = self.our_rec or self.kafka_rec
        return rec["value_version"] if rec else None


def _absent_default(d: Difference) -> bool:
    leaf = re.sub(r"\[\]$", "", d.field.rsplit(".", 1)[-1])
    return d.kafka is _ABSENT and leaf in FIELD_DEFAULTS and d.ours in FIELD_DEFAULTS[leaf]


def _absent_in_kafka(d: Difference) -> bool:
    return d.kafka is _ABSENT


def _consumer_protocol_version_above_3(d: Difference) -> bool:
    if not (isinstance(d.kafka, str) and isinstance(d.ours, dict)):
        return False
    raw = base64.b64decode(d.kafka)
    return len(raw) >= 2 and int.from_bytes(raw[:2], "big", signed=True) > 3


def _anything(d: Difference) -> bool:
    return True


# Why a difference may be accepted: rule id -> (reason, check of the two values).
RULES: dict[str, tuple[str, Callable[[Difference], bool]]] = {
    "absent-field-default": (
        "Kafka's generated JSON converters omit fields that do not exist in the record's version (e.g. "
        "leaderEpoch before OffsetCommitValue v3, ownedPartitions in subscription v0) and tagged fields equal "
        "to their default (topicId zero, metadataHash 0, absent ClassicMemberMetadata); our output materialises "
        "the declared default (docs/inspect-records.md). Accepted only when our value IS that default.",
        _absent_default,
    ),
    "tagged-field-added-after-4.2": (
        "AssignmentTimestamp (types 6/12/20, 4.3), AssignmentEpochs of type 8 (4.3) and the 4.4 streams "
        "topology-epoch tags are unknown tags to Kafka 4.2.1, which skips them silently; we decode them.",
        _absent_in_kafka,
    ),
    "consumer-protocol-version-above-3": (
        "DumpLogSegments decodes subscription/assignment bytes with the generated reader, which rejects "
        "versions > 3 and then prints the raw bytes; Kafka's ConsumerProtocol (and our decoder, spec §6.3) "
        "reads a higher version as the highest known one. Accepted only when the bytes' version is > 3.",
        _consumer_protocol_version_above_3,
    ),
    "types-unknown-to-kafka-4.2": (
        "Type 9 (3.9/4.0 only) and 18 (never released) are not known to Kafka 4.2.1: it prints 'Unknown "
        "record type'; our decoder decodes them per spec §8.1/§9.2.",
        _anything,
    ),
    "historical-layout": (
        "Records of types 5, 7, 8 and 9 our decoder could only decode with the Kafka 3.7 early-access or "
        "4.0 layout (spec Appendix A and §8): Kafka 4.2.1 only knows the current layout and errors or "
        "misreads them. Accepted only for records our decoder marks with such a layout.",
        lambda d: bool(d.our_rec and d.our_rec.get("layout")),
    ),
}


@dataclass(frozen=True)
class Accepted:
    """One field that may differ, in which record types and value versions, and why (a rule).

    A field path occurs at most once per record (or per list element, for ``[]`` paths), which
    bounds every count; ``every``: the field does not exist in these versions, so Kafka omits it in
    EVERY such record we print it in, and the count must equal that number of records (fails
    if either side starts or stops printing it). ``subtree``: the field's sub-paths too.
    """

    rule: str
    record_types: frozenset[int]
    field: str
    versions: frozenset[int] | None = None  # None: any value version
    every: bool = False
    subtree: bool = False

    def matches(self, d: Difference) -> bool:
        if d.record_type not in self.record_types:
            return False
        if self.versions is not None and d.value_version not in self.versions:
            return False
        field = d.field
        return field == self.field or (self.subtree and field.startswith((self.field + ".", self.field + "[")))


def _fields(rule: str, types: set[int], fields: list[str], **kw: Any) -> list[Accepted]:
    return [Accepted(rule, frozenset(types), f, **kw) for f in fields]


_D, _T = "absent-field-default", "tagged-field-added-after-4.2"
_OFFSET_COMMIT = {0, 1}
_MEMBER_SUBSCRIPTION = [f"value.members[].subscription.{f}" for f in ("generation_id", "owned_partitions", "rack_id")]

# Every accepted difference, one field at a time. A difference not listed here fails the test.
ACCEPTED: list[Accepted] = [
    # OffsetCommitValue: leaderEpoch from v3, expireTimestamp only in v1, topicId a v4 tag
    *_fields(_D, _OFFSET_COMMIT, ["value.leader_epoch"], versions=frozenset({0, 1, 2}), every=True),
    *_fields(_D, _OFFSET_COMMIT, ["value.expire_timestamp"], versions=frozenset({0, 2, 3, 4}), every=True),
    *_fields(_D, _OFFSET_COMMIT, ["value.topic_id"], versions=frozenset({0, 1, 2, 3}), every=True),
    *_fields(_D, _OFFSET_COMMIT, ["value.topic_id"], versions=frozenset({4})),
    # GroupMetadataValue: currentStateTimestamp from v2, rebalanceTimeout from v1, groupInstanceId from v3
    *_fields(_D, {2}, ["value.current_state_timestamp"], versions=frozenset({0, 1}), every=True),
    *_fields(_D, {2}, ["value.members[].rebalance_timeout"], versions=frozenset({0})),
    *_fields(_D, {2}, ["value.members[].group_instance_id"], versions=frozenset({0, 1, 2})),
    # consumer-protocol subscription fields of versions the member's bytes do not have
    *_fields(_D, {2}, _MEMBER_SUBSCRIPTION),
    *_fields(
        "consumer-protocol-version-above-3",
        {2},
        ["value.members[].subscription", "value.members[].assignment"],
    ),
    # KIP-848, share and streams tags at their default
    *_fields(_D, {3}, ["value.metadata_hash"]),
    *_fields(_D, {5}, ["value.classic_member_metadata"]),
    *_fields(_D, {17}, [f"value.{f}" for f in ("validated_topology_epoch", "last_assignment_configs")]),
    # tags Kafka 4.2.1 does not know: accepted at any value (at their default by the first rule)
    *[
        a
        for rule in (_D, _T)
        for a in [
            *_fields(rule, {6, 12, 20}, ["value.assignment_timestamp"]),
            *_fields(
                rule,
                {8},
                [
                    "value.assigned_partitions[].assignment_epochs",
                    "value.partitions_pending_revocation[].assignment_epochs",
                ],
            ),
            *_fields(
                rule,
                {22},
                [
                    f"value.{t}{pending}[].assignment_epochs"
                    for t in ("active_tasks", "standby_tasks", "warmup_tasks")
                    for pending in ("", "_pending_revocation")
                ],
            ),
            *_fields(
                rule, {17}, ["value.stored_description_topology_epoch", "value.failed_description_topology_epoch"]
            ),
        ]
    ],
    *_fields(
        "types-unknown-to-kafka-4.2",
        {9, 18},
        ["unknown_type", "error", "key", "value_version", "value"],
        subtree=True,
    ),
    *_fields("historical-layout", {5, 7, 8, 9}, ["error", "key", "value_version", "value"], subtree=True),
]


EVERY = [a for a in ACCEPTED if a.every]


def accept(d: Difference) -> Accepted | None:
    """The listed field and rule that accept ``d``, if any."""
    for a in ACCEPTED:
        if a.matches(d) and RULES[a.rule][1](d):
            return a
    return None


# ---------------------------------------------------------------- comparison


def _diff(path: str, k: Any, o: Any, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(k, dict) and isinstance(o, dict):
        for name in list(k) + [n for n in o if n not in k]:
            sub = f"{path}.{name}" if path else name
            if name not in o:
                out.append((sub, k[name], _ABSENT))
            elif name not in k:
                out.append((sub, _ABSENT, o[name]))
            else:
                _diff(sub, k[name], o[name], out)
    elif isinstance(k, list) and isinstance(o, list):
        if len(k) != len(o):
            out.append((f"{path}.<length>", len(k), len(o)))
        for i, (kv, ov) in enumerate(zip(k, o, strict=False)):
            _diff(f"{path}[{i}]", kv, ov, out)
    elif k != o or type(k) is not type(o):  # type check: True != 1, 1 != 1.0 here
        out.append((path, k, o))


def _index(recs: Iterable[dict[str, Any]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    seen: Counter[tuple[str, int]] = Counter()
    out = {}
    for r in recs:
        n = seen[(r["file"], r["offset"])]
        seen[(r["file"], r["offset"])] += 1
        out[(r["file"], r["offset"], n)] = r
    return out


AcceptedKey = tuple[str, int, "int | None", str]  # (rule, record type, value version, field)


@dataclass
class Comparison:
    differences: list[Difference]
    accepted: Counter[AcceptedKey]
    kafka_records: int
    our_records: int

    @property
    def unaccepted(self) -> list[str]:
        return [str(d) for d in self.differences]

    def by_rule(self) -> dict[str, int]:
        """Accepted differences per rule."""
        out: Counter[str] = Counter()
        for (rule, *_), n in self.accepted.items():
            out[rule] += n
        return dict(out)

    def summary(self, first: int = 30) -> str:
        by_path = Counter(d.field for d in self.differences)
        lines = [
            f"{len(self.differences)} unaccepted difference(s); kafka records={self.kafka_records} "
            f"ours={self.our_records}; accepted: {self.by_rule() or 'none'}",
            "by path: " + ", ".join(f"{p}={n}" for p, n in by_path.most_common(15)),
        ]
        lines += [f"  {d}" for d in self.differences[:first]]
        if len(self.differences) > first:
            lines.append(f"  ... {len(self.differences) - first} more")
        return "\n".join(lines)


def compare_detailed(kafka_recs: Iterable[dict[str, Any]], our_recs: Iterable[dict[str, Any]]) -> Comparison:
    """Compare canonical records (outputs of canonical_from_kafka / canonical_from_ours).

    A difference is accepted only by a field listed in :data:`ACCEPTED` whose rule holds for the
    two values; a field listed with ``every`` that is NOT different in some record of its
    type/version is itself reported (``<accepted field present>``).
    """
    k_idx, o_idx = _index(kafka_recs), _index(our_recs)
    diffs: list[Difference] = []
    accepted: Counter[AcceptedKey] = Counter()
    printed: Counter[tuple[int, int, str]] = Counter()  # (type, version, value field) -> records we print it in
    every_seen: dict[tuple[Accepted, int, int], set[tuple[str, int, int]]] = defaultdict(set)
    missing: defaultdict[str, list[int]] = defaultdict(list)
    extra: defaultdict[str, list[int]] = defaultdict(list)
    for ident in sorted(set(k_idx) | set(o_idx)):
        k, o = k_idx.get(ident), o_idx.get(ident)
        if o is None:
            missing[ident[0]].append(ident[1])
            continue
        if k is None:
            extra[ident[0]].append(ident[1])
            continue
        if isinstance(o["value"], dict) and o["record_type"] is not None:
            for name in o["value"]:
                printed[(o["record_type"], o["value_version"], f"value.{name}")] += 1
        raw: list[tuple[str, Any, Any]] = []
        _diff("", {f: k[f] for f in CANONICAL_FIELDS}, {f: o[f] for f in CANONICAL_FIELDS}, raw)
        for path, kv, ov in raw:
            d = Difference(ident[0], ident[1], path, kv, ov, k, o)
            if kv is _ABSENT:  # Kafka omitted it: counts for an `every` field, accepted or not
                for e in EVERY:
                    if e.matches(d):
                        every_seen[(e, d.record_type, d.value_version)].add(ident)  # type: ignore[index]
            a = accept(d)
            if a is None:
                diffs.append(d)
            else:
                accepted[(a.rule, d.record_type, d.value_version, d.field)] += 1  # type: ignore[index]
    for a in EVERY:
        for (rtype, version, field), n in sorted(printed.items()):
            if field == a.field and rtype in a.record_types and a.versions is not None and version in a.versions:
                seen = len(every_seen.get((a, rtype, version), ()))
                if seen != n:
                    diffs.append(
                        Difference(
                            "<all files>",
                            -1,
                            f"<accepted field present> type {rtype} v{version} {a.field}",
                            f"absent in {seen} records",
                            f"{n} records",
                            None,
                            None,
                        )
                    )
    for file, offs in sorted(missing.items()):
        diffs.insert(
            0,
            Difference(file, offs[0], "<missing in ours>", f"{len(offs)} offsets {_ranges(offs)}", _ABSENT, None, None),
        )
    for file, offs in sorted(extra.items()):
        diffs.insert(
            0, Difference(file, offs[0], "<extra in ours>", _ABSENT, f"{len(offs)} offsets {_ranges(offs)}", None, None)
        )
    return Comparison(diffs, accepted, len(k_idx), len(o_idx))


def compare(kafka_recs: Iterable[dict[str, Any]], our_recs: Iterable[dict[str, Any]]) -> list[str]:
    """Every unaccepted difference between canonical Kafka records and canonical records of ours."""
    return compare_detailed(kafka_recs, our_recs).unaccepted


def _ranges(offs: list[int], limit: int = 8) -> str:
    offs = sorted(offs)
    spans: list[str] = []
    start = prev = offs[0]
    for x in [*offs[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(spans[:limit]) + (",..." if len(spans) > limit else "")
