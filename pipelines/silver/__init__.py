"""Silver: bronze records decoded into typed Delta tables (docs/silver.md)."""
