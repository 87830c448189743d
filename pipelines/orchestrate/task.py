"""The body of an Airflow task: run one stage of a job with the CLI, and turn its exit code into
what Airflow does next (retry, fail at once, skip). Airflow is imported only when a task runs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pipelines.orchestrate.commands import BIN_ENV, Verdict, cli_bin, stage_command, verdict

__all__ = ["run_stage"]

log = logging.getLogger(__name__)


def _airflow_exceptions() -> dict[str, type[BaseException]]:
    try:  # Airflow 3: the task SDK's exceptions are the ones the task runner acts on
        from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
    except ImportError:  # Airflow 2
        from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException
    return {"retry": AirflowException, "fail": AirflowFailException, "skip": AirflowSkipException}


def raise_for(v: Verdict) -> None:
    """Raise the Airflow exception that makes Airflow do what the verdict says (nothing for ok)."""
    if v.action != "ok":
        raise _airflow_exceptions()[v.action](v.message)


def run_stage(job: str, stage: str, config: str) -> dict[str, Any] | None:
    """Run ``stage`` of ``job`` with the CLI (``$OFFSETS_LAKEHOUSE_BIN``); its logs go to the task's
    log, its run report (JSON) is the task's return value (an XCom)."""
    cmd = stage_command(cli_bin(), job, stage, Path(config))
    log.info("running %s", " ".join(cmd))
    with tempfile.TemporaryFile("w+") as out:
        try:
            # its own process group: a task Airflow kills takes the CLI and its JVM with it
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                cwd=Path(config).parent,
                start_new_session=True,
            )
        except OSError as exc:  # a wrong OFFSETS_LAKEHOUSE_BIN: retrying will not find it either
            raise _airflow_exceptions()["fail"](f"cannot run {cmd[0]!r} (set {BIN_ENV}): {exc}") from exc
        error = ""
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                line = line.rstrip("\n")
                log.info("%s", line)
                if line.startswith("error: "):
                    error = line.removeprefix("error: ")
            code = proc.wait()
        finally:
            _stop(proc)
        out.seek(0)
        report = _report(out.read())
    failed = _failed_rules(report) if report and code == 3 else []
    v = verdict(code, job, stage, Path(config), error, failed)
    log.info("%s", v.message)
    raise_for(v)
    return report


def _stop(proc: subprocess.Popen[str]) -> None:
    """End the CLI's process group if it is still running (the task was killed or timed out)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            return


def _report(text: str) -> dict[str, Any] | None:
    """The run report the CLI printed with --json (its last JSON line), if any."""
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _failed_rules(report: dict[str, Any]) -> list[str]:
    """The rules a quality stage of the report failed (its details: one dict, or one per checkpoint)."""
    out: list[str] = []
    for stage in report.get("stages") or []:
        if isinstance(stage, dict) and stage.get("stage") == "quality":
            details = stage.get("details")
            for d in details if isinstance(details, list) else [details]:
                if isinstance(d, dict):
                    out += [str(rule) for rule in d.get("failed") or []]
    return out
