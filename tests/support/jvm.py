"""JVM options for the Spark drivers tests start: the CLI processes, and the tiers' own sessions.

Such a process runs a few jobs on a few thousand records and exits, so the JVM's optimising (C2)
compiler costs more CPU than it saves: with C1 only, a 3,000-record bronze-silver-gold run took
87 CPU-seconds instead of 126 (wall 57 s instead of 71, quiet 2-core machine, 2026-11-26). A JVM
that lives for a whole tier (the spark fixture's) keeps C2: there, C1 only was slower
(docs/performance.md); only its collector is changed (below). The tiers start dozens of such
processes (docs/testing.md).
"""

from __future__ import annotations

# C1's code cache is 48 MB by default; S3A and the AWS SDK filled it in an object-store run
# ("CodeCache is full. Compiler has been disabled", and the rest of the run interpreted)
SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=128m"

# Tests run the pipeline on a few thousand records, where compiling Java for every query plan
# (whole-stage and expression codegen) is a quarter of the JVM's CPU (a flight recording of a
# 3,000-record run: janino compiling and Spark formatting the generated source). Spark's
# interpreted mode gives the same results; a 3,000-record incremental run took 24-31 JVM
# CPU-seconds instead of 31-46 (wall 22-24 s instead of 25-34 s, 2026-11-27). The kafka tier,
# the standalone-cluster test and the set-up's demo keep Spark's default, so the codegen path
# stays covered.
INTERPRETED_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

# for a jobs.yaml's spark.conf
SHORT_RUN_CONF = {"spark.driver.extraJavaOptions": SHORT_RUN_JAVA_OPTIONS, **INTERPRETED_CONF}
# the same in a jobs.yaml written as text, inside the braces of spark.conf
SHORT_RUN_JVM_YAML = f'spark.driver.extraJavaOptions: "{SHORT_RUN_JAVA_OPTIONS}"'
SHORT_RUN_YAML = ", ".join([SHORT_RUN_JVM_YAML, *(f'{k}: "{v}"' for k, v in INTERPRETED_CONF.items())])

# The tiers' own session (tests/spark/conftest.py; the e2e tier uses the same fixture): two of
# them share the 2 cores (one per xdist worker) for a whole tier of small jobs, and G1's
# concurrent threads compete with the other worker's. The throughput collector made
# test_silver_generated.py alone 142-145 s instead of 157-167 s (quiet 2-core machine,
# 2026-11-27); the serial collector 149 s, C1 only 189 s.
TIER_SESSION_JAVA_OPTIONS = "-XX:+UseParallelGC"
