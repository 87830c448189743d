"""The garbage collector's pause around the decoder's and the replay's work."""

from __future__ import annotations

import gc

import pytest

from pipelines.runtime import collector


@pytest.fixture
def enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_enabled_again_after(enabled) -> None:
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_after_an_error(enabled) -> None:
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled(enabled) -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_the_decoder_leaves_the_collector_as_it_found_it(enabled) -> None:
    """decode_blobs pauses per batch, never across its yield (the caller's code runs there)."""
    from pipelines.silver.decode import build_plan
    from pipelines.silver.local import bronze_table
    from pipelines.silver.split import decode_blobs

    rows = [{"cluster": "c", "partition": 0, "offset": i, "key": None, "value": None, "control": False}
            for i in range(3)]  # fmt: skip
    seen = []
    for _ in decode_blobs(bronze_table(rows).to_batches(max_chunksize=1), build_plan()):
        seen.append(gc.isenabled())
    assert seen == [True, True, True]
    assert gc.isenabled()
