"""What an orchestrator runs for a stage of a job, and what the command's exit code means for it.

Pure Python (no Airflow, no Spark): the command line of one stage, and the verdict on its exit
code (docs/cli.md): 0 done, 1 a failure worth retrying; 2 a configuration error, 3 a data-quality
failure and 5 a Kafka cluster that refused the job (none gets better by retrying); 4 another run
of the job holds its lock (this run has nothing to do: skipped). Any other code (a signal, a
missing interpreter) is treated like 1.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "BIN_ENV",
    "CONFIG_ENV",
    "EXIT_CODES",
    "Verdict",
    "cli_bin",
    "config_path",
    "quality_hint",
    "stage_command",
    "verdict",
]

BIN_ENV = "OFFSETS_LAKEHOUSE_BIN"
CONFIG_ENV = "OFFSETS_LAKEHOUSE_CONFIG"

Action = Literal["ok", "retry", "fail", "skip"]

# exit code -> (what the orchestrator does, why); docs/cli.md and docs/airflow.md
EXIT_CODES: dict[int, tuple[Action, str]] = {
    0: ("ok", "ok"),
    1: ("retry", "failure"),
    2: ("fail", "configuration error"),
    3: ("fail", "data-quality failure"),
    4: ("skip", "another run of this job is in progress"),
    5: ("fail", "Kafka refused the job (login, certificate, TLS or ACLs)"),
    6: ("fail", "the lakehouse's storage refuses writes (disk full, permissions)"),
}


@dataclass(frozen=True)
class Verdict:
    action: Action
    message: str


def cli_bin(environ: dict[str, str] | None = None) -> list[str]:
    """The command that runs the CLI: ``$OFFSETS_LAKEHOUSE_BIN`` split like a shell would (so
    ``/opt/lakehouse/.venv/bin/python -m pipelines.cli.main`` works), else ``offsets-lakehouse``
    on PATH."""
    value = (environ if environ is not None else os.environ).get(BIN_ENV, "").strip()
    return shlex.split(value) if value else ["offsets-lakehouse"]


def config_path(environ: dict[str, str] | None = None) -> Path:
    """``$OFFSETS_LAKEHOUSE_CONFIG`` (default ``jobs.yaml``), absolute: tasks run in other
    directories than the one the DAG file was parsed in."""
    return Path((environ if environ is not None else os.environ).get(CONFIG_ENV) or "jobs.yaml").resolve()


def stage_command(cli: list[str], job: str, stage: str, config: Path) -> list[str]:
    """One stage of ``job`` as the CLI runs it: the run report as JSON on stdout, JSON logs on stderr."""
    return [*cli, "run", job, "--stage", stage, "-c", str(config), "--json", "--log-format", "json"]


def quality_hint(config: Path) -> str:
    return f"see `offsets-lakehouse quality report -c {config}` (or the Data Docs it names)"


def verdict(code: int, job: str, stage: str, config: Path, error: str = "", failed_rules: list[str] = ()) -> Verdict:
    """What a stage's exit ``code`` means; ``error`` is the CLI's one-line error, if it printed one."""
    action, meaning = EXIT_CODES.get(code, ("retry", "failure"))
    where = f"offsets-lakehouse run {job} --stage {stage}"
    if code not in EXIT_CODES:
        meaning = f"ended by signal {-code}" if code < 0 else f"unexpected exit code {code}"
    detail = f": {error}" if error else ""
    if code == 3:
        rules = f" ({', '.join(failed_rules[:5])}{', …' if len(failed_rules) > 5 else ''})" if failed_rules else ""
        message = f"{where}: data-quality failure (exit 3, not retried): a rule with policy fail failed{rules}; "
        return Verdict(action, message + quality_hint(config))
    if action == "fail":
        return Verdict(action, f"{where}: {meaning} (exit {code}, not retried){detail}")
    if action == "skip":
        return Verdict(action, f"{where}: skipped: {meaning} (exit {code}){detail}")
    if action == "retry":
        return Verdict(action, f"{where}: {meaning} (exit {code}){detail}")
    return Verdict(action, f"{where}: ok")
