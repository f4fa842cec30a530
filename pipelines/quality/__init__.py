"""Data quality: prove no loss, no duplicates, per-key order and correct routing."""

import logging

# Great Expectations logs one INFO line per function it registers while it imports (209 lines of "Skipping
# registering function ..."), which an Airflow task's log keeps above our verdict table: quiet it before any module
# of this package imports it.
logging.getLogger("great_expectations").setLevel(logging.WARNING)
