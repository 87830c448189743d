"""A Kafka Streams application instance (tools/kafka/StreamsApp.java) as a child process.

No Python client implements the KIP-1071 streams group protocol, so the harness runs Kafka's own
Streams library in a JVM. The application reports its state changes on stdout ("STATE RUNNING");
closing its stdin makes it close, leave the group and print "CLOSED".
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO

from tests.harness import admin as java_admin


class StreamsAppError(AssertionError):
    """The Streams application did not do what the scenario needs."""


class StreamsInstance:
    def __init__(
        self, bootstrap: str, application_id: str, client_id: str, state_dir: Path, source: str, sink: str
    ) -> None:
        self.client_id = client_id
        state_dir.mkdir(parents=True, exist_ok=True)
        # the library's log on stderr (stdout carries the state lines), warnings and errors only
        log4j = state_dir / "log4j2.yaml"
        log4j.write_text(
            "Configuration:\n"
            "  Appenders:\n"
            "    Console: {name: STDERR, target: SYSTEM_ERR, PatternLayout: {pattern: '[%d] %p %m (%c)%n'}}\n"
            "  Loggers:\n"
            "    Root: {level: WARN, AppenderRef: [{ref: STDERR}]}\n"
        )
        cmd = java_admin.java_command(
            "StreamsApp",
            bootstrap,
            application_id,
            client_id,
            str(state_dir / "state"),
            source,
            sink,
            jvm=("-Xmx256m", f"-Dlog4j2.configurationFile={log4j}"),
        )
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.lines: list[str] = []
        self._errors: deque[str] = deque(maxlen=15)  # the end of the library's log, for failures
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout, self.lines), daemon=True)
        self._reader.start()
        threading.Thread(target=self._read, args=(self._proc.stderr, self._errors), daemon=True).start()

    @staticmethod
    def _read(stream: IO[str] | None, into: list[str] | deque[str]) -> None:
        assert stream is not None
        for line in stream:
            into.append(line.rstrip("\n"))

    def wait_for(self, line: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.lines:
                return
            if self._proc.poll() is not None:
                self._reader.join(5)
                if line in self.lines:
                    return
                raise StreamsAppError(f"{self.client_id} exited ({self._proc.returncode}) before {line!r}: {self}")
            time.sleep(0.1)
        raise StreamsAppError(f"{self.client_id}: no {line!r} within {timeout:.0f} s: {self}")

    def stop(self, timeout: float = 60.0) -> None:
        """Close the application (it leaves the group) and wait for the JVM to exit."""
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        try:
            rc = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise StreamsAppError(f"{self.client_id} did not close within {timeout:.0f} s: {self}") from None
        self._reader.join(5)
        if rc != 0 or "CLOSED" not in self.lines:
            raise StreamsAppError(f"{self.client_id} closed with exit code {rc}: {self}")

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)

    def __str__(self) -> str:
        return f"stdout {self.lines[-10:]}, stderr:\n" + "\n".join(self._errors)
