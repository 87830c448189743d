"""The ``offsets-lakehouse`` command line. Thin: parsing, output and exit codes only.

Exit codes (docs/cli.md): 0 ok, 1 failure (undecodable records, corrupt batches, a failed
run), 2 bad arguments or configuration, 3 data-quality failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_QUALITY = 0, 1, 2, 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="offsets-lakehouse")
def cli() -> None:
    """Turn Kafka's __consumer_offsets topic into Delta tables, and inspect its bytes."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with totals and per-file counts.")
@click.option("--records", is_flag=True, help="Stream every record as a JSON line (docs/inspect-records.md).")
def inspect(paths: tuple[Path, ...], as_json: bool, records: bool) -> None:
    """Decode log directories or .log files and report what is in them.

    Exit code 0 when everything decoded (a torn tail at the end of a partition's last
    segment is normal for a copy of a live broker), 1 when any record is undecodable
    or any batch corrupt, 2 for bad arguments.
    """
    from pipelines.codec.segments import discover
    from pipelines.inspect import inspect_segment, iter_record_json, totals

    if as_json and records:
        raise click.UsageError("--json and --records are exclusive")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise click.BadParameter(f"no such file or directory: {', '.join(missing)}", param_hint="PATHS")
    segments = discover(list(paths))
    if not segments:
        raise click.BadParameter("no __consumer_offsets segment files (*.log) found", param_hint="PATHS")

    if records:
        failed = False
        out = sys.stdout
        for doc in iter_record_json(segments):
            failed |= doc["status"] != "ok"
            out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        # corrupt batches do not appear as records: count them with a census pass
        failed |= any(r.corrupt_batches for r in map(inspect_segment, segments))
        sys.exit(EXIT_FAILURE if failed else EXIT_OK)

    reports = [inspect_segment(seg) for seg in segments]
    summary = totals(reports)
    if as_json:
        click.echo(json.dumps({"totals": summary, "files": [r.to_json() for r in reports]}, indent=2))
    else:
        from pipelines.cli.render import render_inspect

        render_inspect(reports, summary)
    bad = summary["undecodable"] or summary["corrupt_batches"]
    sys.exit(EXIT_FAILURE if bad else EXIT_OK)


def main() -> None:
    cli(prog_name="offsets-lakehouse")


if __name__ == "__main__":
    main()
