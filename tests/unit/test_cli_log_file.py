"""``--log-file``: logs appended to a file that logrotate may move away (docs/operations.md)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pipelines.cli.main import _setup_logging


def test_log_file_appends_and_follows_rotation(tmp_path: Path) -> None:
    path = tmp_path / "log" / "demo.log"
    path.parent.mkdir()
    path.write_text("an earlier run\n")
    log = logging.getLogger("offsets_lakehouse")
    try:
        _setup_logging(False, "json", path)
        log.info("before rotation")
        path.rename(tmp_path / "log" / "demo.log.1")  # what logrotate does (with `create`: a new file)
        log.info("after rotation")
        log.debug("not at INFO")
    finally:
        for h in log.handlers:
            h.close()
        log.handlers[:] = []
    rotated = (tmp_path / "log" / "demo.log.1").read_text().splitlines()
    assert rotated[0] == "an earlier run", "appended, not truncated"
    assert [json.loads(line)["message"] for line in rotated[1:]] == ["before rotation"]
    assert [json.loads(line)["message"] for line in path.read_text().splitlines()] == ["after rotation"]
