"""Runtime: configuration (jobs.yaml), JVM jars, the Spark session and Delta table I/O."""
