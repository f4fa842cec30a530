"""Airflow glue for elastic pipelines: the hook that finds a deployment's home, the scaling path, the UI page.

The operations themselves live in ``pipelines.operations`` (the CLI runs the
same code); this package only turns them into Airflow tasks. Airflow puts the
plugins folder on ``sys.path``, so DAG files import it as ``pipelines_airflow``.
"""
