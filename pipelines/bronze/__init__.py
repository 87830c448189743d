"""Bronze: raw records from segment files, a live cluster or dumps, ingested idempotently."""
