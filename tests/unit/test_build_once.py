"""tests/support/build_once.py: two xdist workers asking for the same build at once get one build;
a failed build fails the other worker without a second try; a change to a shared build is caught."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.build_once import assert_unchanged, build_once


class Worker:
    """What build_once uses of pytest's TempPathFactory: the worker's own base temp."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        self.base.mkdir(parents=True, exist_ok=True)
        return self.base


@pytest.fixture()
def workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Worker]:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")  # as under xdist: the run's dir is the parent
    return [Worker(tmp_path / "popen-gw0"), Worker(tmp_path / "popen-gw1")]


def test_two_workers_at_once_get_one_build(workers: list[Worker], tmp_path: Path) -> None:
    builds: list[str] = []
    inside = threading.Event()

    def build(target: Path) -> None:
        builds.append(threading.current_thread().name)
        inside.set()
        time.sleep(0.5)  # the other worker arrives meanwhile and must wait
        (target / "data").write_text("built")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(build_once, workers[0], "thing", build)
        assert inside.wait(10)
        second = pool.submit(build_once, workers[1], "thing", build)
        paths = [first.result(10), second.result(10)]
    assert len(builds) == 1
    assert paths == [tmp_path / "thing"] * 2
    assert (tmp_path / "thing" / "data").read_text() == "built"
    assert build_once(workers[1], "thing", build) == tmp_path / "thing" and len(builds) == 1  # later: no build
    assert_unchanged(tmp_path / "thing")


def test_a_failed_build_fails_the_other_worker_without_a_second_try(workers: list[Worker]) -> None:
    builds = []

    def build(target: Path) -> None:
        builds.append(target)
        raise RuntimeError("the generator broke")

    with pytest.raises(RuntimeError, match="the generator broke"):
        build_once(workers[0], "thing", build)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)failed in another worker.*the generator broke"):
        build_once(workers[1], "thing", build)
    assert len(builds) == 1


def test_a_changed_build_is_caught(workers: list[Worker], tmp_path: Path) -> None:
    target = build_once(workers[0], "thing", lambda t: (t / "a").write_text("1"))
    (target / "b").write_text("added by a test")
    with pytest.raises(AssertionError, match=r"changed by a test.*\['b'\]"):
        assert_unchanged(target)
    (target / "b").unlink()
    assert_unchanged(target)
    (target / "a").write_text("2")  # same size, rewritten
    with pytest.raises(AssertionError, match=r"\['a'\]"):
        assert_unchanged(target)
