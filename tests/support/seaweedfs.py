"""SeaweedFS, a real distributed object store, for the long tier and the object-store benchmark
(docs/object-storage.md): ``weed server -s3`` on loopback, behind the same proxy as moto's server
(tests/support/store.py).

The server is built from the Go module proxy once (``go build`` of the module's ``weed`` command,
about 10 minutes on 2 cores) and cached like the Kafka jars, under
``$OFFSETS_LAKEHOUSE_CACHE/seaweedfs-<version>/weed``. Nothing of it is kept in the repository.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.store import Store, StoreProxy, _wait_listening, free_port

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"  # the version the Go module proxy serves here


def binary() -> Path:
    """The ``weed`` binary, built on first use."""
    cache = Path(os.environ.get("OFFSETS_LAKEHOUSE_CACHE", Path.home() / ".cache" / "offsets-lakehouse"))
    weed = cache / f"seaweedfs-{VERSION.rsplit('-', 1)[-1]}" / "weed"
    if weed.exists():
        return weed
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"SeaweedFS is not built ({weed}) and Go is not installed to build it")
    info = json.loads(
        subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], check=True, capture_output=True).stdout
    )
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(info["Dir"], src)
        for path in src.rglob("*"):  # the module cache is read-only
            path.chmod(path.stat().st_mode | 0o200)
        weed.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([go, "build", "-o", str(weed.with_suffix(".tmp")), "./weed"], cwd=src, check=True)
        weed.with_suffix(".tmp").rename(weed)
    return weed


@contextlib.contextmanager
def seaweedfs_store(workdir: Path) -> Iterator[Store]:
    """A SeaweedFS master, volume server, filer and S3 gateway on loopback, storing under
    ``workdir``, with the tests' credentials; behind a :class:`StoreProxy`."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    s3_config = workdir / "s3.json"
    s3_config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tests",
                        "credentials": [{"accessKey": "test-key", "secretKey": "test-secret-key"}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    s3_port = free_port()
    cmd = [
        str(binary()),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={free_port()}",
        f"-volume.port={free_port()}",
        f"-filer.port={free_port()}",
        "-s3",
        f"-s3.port={s3_port}",
        f"-s3.config={s3_config}",
        "-volume.max=50",
    ]
    with open(workdir / "weed.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_listening(s3_port, proc, timeout=120)
        proxy = StoreProxy(s3_port)
        try:
            yield Store(proxy, proc, f"http://127.0.0.1:{s3_port}")
        finally:
            proxy.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
