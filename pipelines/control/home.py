"""The home directory: the one folder that holds all of a deployment's state.

Layout (every part is created lazily by whoever writes it first)::

    <home>/streams/    embedded Delta-log input streams (``DeltaLog(home.streams)``)
    <home>/control/    control-plane Delta tables, one folder per table
    <home>/producers/  the CLI producer's per-stream sequence cache (a cache, never the truth)
    <home>/spark/      Spark checkpoint locations, one per job and model version
    <home>/sinks/      Delta sink tables of the jobs

One root keeps a laptop run, a test's ``tmp_path`` and a cluster deployment
(the root on shared or object storage) the same shape: a process needs only
``--home`` or ``PIPELINES_HOME`` to find everything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipelines.errors import ConfigError

HOME_ENV = "PIPELINES_HOME"
DEFAULT_HOME = ".pipelines-home"


@dataclass(frozen=True)
class Home:
    """Where a deployment's state lives; paths only, nothing is created here."""

    root: Path

    @property
    def streams(self) -> Path:
        return self.root / "streams"

    @property
    def control(self) -> Path:
        return self.root / "control"

    @property
    def producers(self) -> Path:
        return self.root / "producers"

    @property
    def spark_checkpoints(self) -> Path:
        return self.root / "spark"

    @property
    def sinks(self) -> Path:
        return self.root / "sinks"

    def control_table(self, name: str) -> Path:
        return self.control / name


def resolve_home(cli_value: str | None = None) -> Home:
    """``--home`` wins over ``PIPELINES_HOME``, which wins over ``./.pipelines-home``.

    The path is made absolute at once: Airflow tasks, spark-submit and Spark's
    Python workers run with other working directories, and a relative home
    would silently point each of them at a different, empty state.
    """
    if cli_value is not None and not cli_value.strip():
        raise ConfigError("--home is empty; give a directory, or leave it out to use $PIPELINES_HOME or the default")
    value = cli_value or os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Home(Path(value).expanduser().resolve())
