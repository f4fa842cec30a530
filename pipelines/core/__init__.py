"""Pure logic: no Spark, Airflow, Delta or network imports live below this package."""
