"""Operations on running jobs (rescale, ...): what the CLI and the Airflow DAGs call."""
