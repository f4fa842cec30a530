"""argparse built from the command table, and what a parsed command line says about writing and its handler."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, cast

from pipelines.cli.table import COMMANDS, VERBOSE_HELP, ActionCommand, GroupCommand, actions
from pipelines.usage import Parser

if TYPE_CHECKING:
    from pipelines.cli.output import Output
    from pipelines.storage.home import Home

Handler = Callable[[argparse.Namespace, "Home", "Output"], None]

WRITING: frozenset[str] = frozenset(name for name, command in actions() if command.writes is not False)
"""Commands that may change state in the home (some only with certain flags: see ``writes``)."""


class CliParser(Parser):
    """The CLI's parser: it keeps the last usage error, which ``main`` also prints as JSON under ``--json``."""

    last_error: str | None = None

    def error(self, message: str) -> NoReturn:
        CliParser.last_error = f"{self.prog}: {message} (see '{self.prog} --help')"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    # Global options are accepted before and after the command; the subcommands' copies default to
    # SUPPRESS so a value given before the command is not reset by the subparser.
    common = CliParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help="state directory (default: $PIPELINES_HOME)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    common.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)

    parser = CliParser(
        prog="pipelines", description="Elastic stream processing on Spark: streams, job models, control plane."
    )
    parser.add_argument(
        "--home",
        default=None,
        help="state directory (default: $PIPELINES_HOME, else ./.pipelines-home)",
    )
    parser.add_argument("--json", action="store_true", default=False, help="machine-readable output on stdout")
    parser.add_argument("--verbose", action="store_true", default=False, help=VERBOSE_HELP)
    groups = parser.add_subparsers(
        dest="group", required=True, metavar="{" + ",".join(entry.name for entry in COMMANDS) + "}"
    )
    for entry in COMMANDS:
        if isinstance(entry, GroupCommand):
            group = groups.add_parser(entry.name, help=entry.help, parents=[common])
            commands = group.add_subparsers(dest="command", required=True)
            for command in entry.subcommands:
                _add_command(commands, command, common)
        else:
            _add_command(groups, entry, common)
    return parser


def _add_command(
    subparsers: argparse._SubParsersAction[CliParser],
    command: ActionCommand,
    common: CliParser,
) -> None:
    p = subparsers.add_parser(command.name, help=command.help, parents=[common])
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for a in command.args:
        target: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup = p
        if a.exclusive is not None:
            if a.exclusive not in exclusive:
                exclusive[a.exclusive] = p.add_mutually_exclusive_group()
            target = exclusive[a.exclusive]
        target.add_argument(*a.flags, **a.options)
    p.set_defaults(entry=command)


def writes(args: argparse.Namespace) -> bool:
    """Whether the parsed command changes state in the home: those are refused up front on a home they cannot write."""
    flag = cast(ActionCommand, args.entry).writes
    return flag(args) if callable(flag) else flag


def handler(command: ActionCommand) -> Handler:
    """The command's handler, imported now: only the command that runs loads its libraries."""
    module, _, name = command.handler.rpartition(".")
    return cast(Handler, getattr(importlib.import_module(module), name))
