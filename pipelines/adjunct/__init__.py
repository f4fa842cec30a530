"""Adjunct data (AD) stores: read-only key-value stores the platform fills from streams for a job to look up.

``config`` (the job YAML's ``stores:`` section), ``extract`` (records to
changes), ``durable`` (the truth, in Delta), ``ingest`` (the driver: recovery,
bootstrap, ingest), ``local`` and ``views`` (the executors' engine and the
lookup API), ``checkpoints`` (the store rows of the job's checkpoints). The
pure rules are in ``pipelines.core.adjunct``.
"""
