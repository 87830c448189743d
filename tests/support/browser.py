"""Headless Chromium for the e2e tier's page checks (Debian's `chromium`, installed by
scripts/setup): the rendered DOM (`--dump-dom`) and screenshots, offline."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed: run ./scripts/setup as root (installs Debian's chromium)")


def browse(url: str, *extra: str) -> subprocess.CompletedProcess:
    """Headless Chromium, offline: every host name fails to resolve, so CDN assets are absent."""
    args = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--window-size=1280,900",
        *extra,
        url,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)
