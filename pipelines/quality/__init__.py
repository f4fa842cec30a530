"""Data quality: prove no loss, no duplicates, per-key order and correct routing."""
