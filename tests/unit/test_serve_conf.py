"""`serve`'s endpoints and Spark settings (docs/sql.md), without a JVM."""

from __future__ import annotations

import os
import socket

import pytest

from pipelines import serve
from pipelines.errors import OffsetsLakehouseError


def test_endpoints_default_ports_and_urls() -> None:
    assert [e.url for e in serve.endpoints("thrift", "127.0.0.1", None)] == ["jdbc:hive2://127.0.0.1:10000"]
    assert [e.url for e in serve.endpoints("connect", "0.0.0.0", 9)] == ["sc://0.0.0.0:9"]
    both = serve.endpoints("both", "h", 1, 2)
    assert [(e.protocol, e.port) for e in both] == [("thrift", 1), ("connect", 2)]


def test_spark_conf_keeps_the_users_list_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve.jars, "resolve", lambda: ["/j/delta.jar", "/j/kafka.jar"])
    user = {"spark.plugins": "com.example.Plugin", "spark.driver.extraJavaOptions": "-Xss4m"}
    conf = serve.spark_conf(serve.endpoints("both", "127.0.0.1", 10001, 15003), user)
    assert conf["spark.driver.extraClassPath"].split(os.pathsep) == ["/j/delta.jar", "/j/kafka.jar"]
    assert conf["spark.plugins"] == "com.example.Plugin,org.apache.spark.sql.connect.SparkConnectPlugin"
    assert conf["spark.driver.extraJavaOptions"].startswith("-Xss4m -Dderby.stream.error.file=")
    assert conf["spark.hadoop.hive.server2.thrift.port"] == "10001"
    assert conf["spark.hadoop.hive.server2.thrift.bind.host"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15003"
    only_thrift = serve.spark_conf(serve.endpoints("thrift", "127.0.0.1", None), {})
    assert "spark.plugins" not in only_thrift and "spark.connect.grpc.binding.port" not in only_thrift


def test_a_port_in_use_is_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OffsetsLakehouseError, match=rf"thrift port 127.0.0.1:{port}: Address already in use"):
            serve.check_port_free(serve.Endpoint("thrift", "127.0.0.1", port))
    serve.check_port_free(serve.Endpoint("thrift", "127.0.0.1", port))  # released: free again
