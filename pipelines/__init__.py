"""Elastic stream processing on Spark, operated by Airflow, with its state in Delta tables.

`pipelines.core` holds the pure logic (job model, groupers, key buckets,
checkpoint migration) and imports no Spark, Airflow or I/O library.
"""

__version__ = "0.1.0"
