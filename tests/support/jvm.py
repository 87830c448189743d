"""JVM options for the Spark drivers tests start: the CLI processes, and the tiers' own sessions.

Such a process runs a few jobs on a few thousand records and exits, so the JVM's optimising (C2)
compiler costs more CPU than it saves: with C1 only, a 3,000-record bronze-silver-gold run took
87 CPU-seconds instead of 126 (wall 57 s instead of 71, quiet 2-core machine, 2026-11-26). A JVM
that lives for a whole tier (the spark fixture's) keeps C2: there, C1 only was slower
(docs/performance.md); only its collector is changed (below). The tiers start dozens of such
processes (docs/testing.md).
"""

from __future__ import annotations

SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
# for a jobs.yaml's spark.conf
SHORT_RUN_CONF = {"spark.driver.extraJavaOptions": SHORT_RUN_JAVA_OPTIONS}
# the same in a jobs.yaml written as text, inside the braces of spark.conf
SHORT_RUN_YAML = f'spark.driver.extraJavaOptions: "{SHORT_RUN_JAVA_OPTIONS}"'

# The tiers' own session (tests/spark/conftest.py; the e2e tier uses the same fixture): two of
# them share the 2 cores (one per xdist worker) for a whole tier of small jobs, and G1's
# concurrent threads compete with the other worker's. The throughput collector made
# test_silver_generated.py alone 142-145 s instead of 157-167 s (quiet 2-core machine,
# 2026-11-27); the serial collector 149 s, C1 only 189 s.
TIER_SESSION_JAVA_OPTIONS = "-XX:+UseParallelGC"
