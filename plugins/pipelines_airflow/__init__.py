"""Airflow glue for elastic pipelines: the hook that finds a deployment's home, the scaling path, the UI page.

The operations themselves live in ``pipelines.operations`` (the CLI runs the
same code); this package only turns them into Airflow tasks. It is the
``elastic-pipelines-airflow`` distribution (``plugins/pyproject.toml``):
installed on every Airflow host, it is a provider (``provider``: the
``pipelines`` connection type, the hook, the operators, the trigger) and a
plugin (``plugin``: the page), both found through its entry points. DAG files
import it as ``pipelines_airflow``.
"""
