"""Group id -> ``__consumer_offsets`` partition, exactly as Kafka computes it (spec 11)."""

from __future__ import annotations

_INT_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, 32-bit wrap-around, signed."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def abs_kafka(n: int) -> int:
    """Kafka's ``Utils.abs``: 0 for Integer.MIN_VALUE (Java's ``Math.abs`` would stay negative)."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, partitions: int = 50) -> int:
    if partitions <= 0:
        raise ValueError(f"partition count must be positive, got {partitions}")
    return abs_kafka(java_string_hash(group_id)) % partitions
