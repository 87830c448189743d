"""Human-readable output of the CLI (rich tables). JSON output never goes through here."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from pipelines.codec.records import TYPE_NAMES


def render_inspect(reports: list[Any], summary: dict[str, Any]) -> None:
    console = Console()
    table = Table(title="__consumer_offsets segments", show_lines=False)
    for col in ("file", "part", "batches", "records", "control", "tombstones", "undecodable", "torn tail B", "corrupt"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for r in reports:
        table.add_row(
            _short(r.path),
            str(r.partition if r.partition is not None else "-"),
            str(r.batches),
            str(r.records),
            str(r.control_records),
            str(r.tombstones),
            _flag(r.undecodable),
            str(r.torn_tail_bytes),
            _flag(r.corrupt_batches),
        )
    table.add_section()
    table.add_row(
        f"total ({summary['files']} files)",
        "",
        str(summary["batches"]),
        str(summary["records"]),
        str(summary["control_records"]),
        str(summary["tombstones"]),
        _flag(summary["undecodable"]),
        str(summary["torn_tail_bytes"]),
        _flag(summary["corrupt_batches"]),
    )
    console.print(table)

    types = Table(title="records by type / value version")
    types.add_column("type/version")
    types.add_column("record type")
    types.add_column("count", justify="right")
    for key, count in summary["by_type_version"].items():
        t = key.split("/")[0]
        name = TYPE_NAMES.get(int(t), "unknown") if t.lstrip("-").isdigit() else "unknown"
        label = f"{name} (tombstone)" if key.endswith("/null") else name
        types.add_row(key, label, str(count))
    console.print(types)

    for r in reports:
        for issue in r.issues:
            console.print(
                f"[yellow]{issue['kind']}[/] {r.path} at byte {issue['position']} "
                f"({issue['length']} bytes): {issue['reason']} {issue['detail']}"
            )
        for u in r.undecodable_records:
            console.print(
                f"[red]undecodable[/] {r.path} offset {u['offset']}: {u['reason']} in {u['error_part']} "
                f"at byte {u['error_position']}: {u['error_detail']}"
            )


def _flag(n: int) -> str:
    return f"[red]{n}[/]" if n else "0"


def _short(path: str, width: int = 70) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1) :]
