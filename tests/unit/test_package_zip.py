"""A cluster's executors import the package from the zip the driver ships (runtime/spark.py):
everything they load from it must work from inside a zip, the record declarations included."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from pipelines.runtime.spark import package_zip


def test_the_shipped_zip_decodes_records_by_itself(tmp_path) -> None:
    archive = package_zip()
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(archive)!r})
        import pipelines.codec.schema as schema
        from pipelines.codec.records import decode_key
        assert schema.__file__.startswith({str(archive)!r}), schema.__file__  # from the zip
        d = schema.schemas_dir()
        print(len(list((d / "records").glob("*.yaml"))))
        # an offset commit key (type 1: group "g", topic "t", partition 3)
        key = bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
        import json
        print(json.dumps(decode_key(key)))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env={"TMPDIR": str(tmp_path)}
    )
    assert out.returncode == 0, out.stderr
    count, decoded = out.stdout.splitlines()
    assert int(count) == 24  # every record type 0-23
    assert json.loads(decoded) == [1, {"group": "g", "topic": "t", "partition": 3}]
