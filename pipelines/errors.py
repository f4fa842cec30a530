"""Errors a user can act on.

Every error the platform raises on bad input is a `PipelinesError`, so the CLI
and the Airflow tasks can tell a user mistake (print it, exit non-zero, keep the
job on its old model) from a bug (a traceback).
"""


class PipelinesError(Exception):
    """Base of all errors caused by input the user can fix."""


class ConfigError(PipelinesError):
    """A job configuration, elasticity factor or grouper choice is invalid."""


class PartitionChangeError(PipelinesError):
    """An input's partition count changed in a way the job cannot absorb."""


class ModelError(PipelinesError):
    """A stored job model or checkpoint map does not parse or is inconsistent."""


class UnknownJobError(PipelinesError):
    """The named job has no job model in the control plane."""


class StreamError(PipelinesError):
    """An embedded-log stream is missing, already exists, or was asked something impossible."""
