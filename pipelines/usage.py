"""argparse with the project's one rule for bad input: one ``error: ...`` line on stderr, exit 2.

argparse's own form (a usage block, then ``prog: error: ...``) puts the
reason on the last of several lines, where a script reading the first line or
an Airflow task's log excerpt misses it. The usage stays one ``--help`` away,
which the line names. Every command line of the project (the CLI, the
scripts' Python entry points, the servers, the benchmarks) parses with it;
subparsers inherit the class.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see '{self.prog} --help')\n")
