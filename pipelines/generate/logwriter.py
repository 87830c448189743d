"""Write a broker-like partition log: rolled ``.log`` segments with ``.index``/``.timeindex``.

Offsets are assigned here, consecutively per partition. Segments roll once they reach
``segment_bytes`` and are named after their base offset (20 digits). Index entries are
sparse, one per ``index_interval`` bytes of log, recording the batch's last offset as
Kafka 2.0+ does (spec 10.9).
"""

from __future__ import annotations

import struct
from pathlib import Path

from pipelines.codec.reader import Record
from pipelines.codec.segments import segment_name
from pipelines.codec.writer import encode_legacy, encode_v2_batch


class PartitionLogWriter:
    def __init__(self, directory: Path, partition: int, segment_bytes: int, index_interval: int = 4096) -> None:
        self.dir = directory / f"__consumer_offsets-{partition}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.index_interval = index_interval
        self.next_offset = 0
        self.max_timestamp = -1
        self._log = None
        self._index = None
        self._timeindex = None
        self._base = 0
        self._size = 0
        self._since_index = 0
        self.batches = 0
        self.records = 0

    def _roll(self) -> None:
        self._close_segment()
        self._base = self.next_offset
        self._log = open(self.dir / segment_name(self._base), "wb")  # noqa: SIM115 - closed on roll/close
        self._index = open(self.dir / segment_name(self._base, ".index"), "wb")  # noqa: SIM115
        self._timeindex = open(self.dir / segment_name(self._base, ".timeindex"), "wb")  # noqa: SIM115
        self._size = 0
        self._since_index = 0

    def _close_segment(self) -> None:
        for fh in (self._log, self._index, self._timeindex):
            if fh is not None:
                fh.close()
        self._log = self._index = self._timeindex = None

    def append(
        self,
        items: list[tuple[bytes | None, bytes | None]],
        timestamp: int,
        *,
        magic: int = 2,
        codec: int = 0,
        transactional: bool = False,
        control: bool = False,
        producer_id: int = -1,
        producer_epoch: int = -1,
        leader_epoch: int = 0,
    ) -> list[int]:
        """Append one batch of (key, value) records; returns their offsets."""
        if self._log is None or self._size >= self.segment_bytes:
            self._roll()
        offsets = list(range(self.next_offset, self.next_offset + len(items)))
        records = [Record(o, timestamp, k, v) for o, (k, v) in zip(offsets, items, strict=True)]
        if magic < 2:
            data = encode_legacy(records, magic=magic, codec=codec)
        else:
            data = encode_v2_batch(
                records,
                codec=codec,
                transactional=transactional,
                control=control,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0 if transactional and not control else -1,
                partition_leader_epoch=leader_epoch,
            )
        assert self._log is not None and self._index is not None and self._timeindex is not None
        position = self._size
        self._log.write(data)
        self._size += len(data)
        self._since_index += len(data)
        last = offsets[-1]
        # the index points at an entry and names that entry's last offset; uncompressed
        # legacy records are one entry each, so the entry at `position` ends at offsets[0]
        indexed = offsets[0] if magic < 2 and codec == 0 else last
        if self._since_index >= self.index_interval or position == 0:
            self._index.write(struct.pack(">ii", indexed - self._base, position))
            if timestamp > self.max_timestamp:
                self._timeindex.write(struct.pack(">qi", timestamp, last - self._base))
            self._since_index = 0
        self.max_timestamp = max(self.max_timestamp, timestamp)
        self.next_offset = last + 1
        self.batches += 1
        self.records += len(items)
        return offsets

    def close(self) -> None:
        self._close_segment()
