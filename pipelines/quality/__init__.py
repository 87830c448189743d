"""Data quality: expectation suites (``expectations/*.yaml``) run with Great Expectations on the
lakehouse's Spark DataFrames, with per-rule policies, a results table and Data Docs
(docs/quality.md)."""
