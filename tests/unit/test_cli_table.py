"""The CLI's command table: the parser, the writes-set and the handlers all come from it, and loading it is cheap.

``pipelines --help`` or ``pipelines model plan`` must not pay for Spark, Airflow or the demo, and a command
that changes the home must be refused up front on a home it cannot write, whichever flag makes it write.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from pipelines.cli import build_parser
from pipelines.cli.parser import WRITING, handler, writes
from pipelines.cli.table import COMMANDS, GroupCommand, actions

HEAVY = ("pipelines.demo", "pyspark", "airflow")

# Each command with the fewest arguments it parses with, and whether that command line writes to the home.
COMMAND_LINES: dict[str, list[tuple[list[str], bool]]] = {
    "stream create": [(["stream", "create", "s", "--partitions", "2"], True)],
    "stream produce": [(["stream", "produce", "s", "--records", "1", "--keys", "1"], True)],
    "stream expand": [(["stream", "expand", "s", "--partitions", "4"], True)],
    "stream describe": [(["stream", "describe", "s"], False)],
    "stream alter": [(["stream", "alter", "s", "--retention", "forever"], True)],
    "stream compact": [(["stream", "compact", "s"], True), (["stream", "compact", "s", "--dry-run"], False)],
    "stream trim": [
        (["stream", "trim", "s", "--older-than", "7d"], True),
        (["stream", "trim", "s", "--before", "2026-11-27T08:00:00Z", "--dry-run"], False),
    ],
    "model plan": [(["model", "plan"], False), (["model", "plan", "--save"], True)],
    "model migrate": [(["model", "migrate", "--from", "-", "--to-factor", "2"], False)],
    "model import": [(["model", "import", "--samza", "-"], False)],
    "model export": [(["model", "export", "--job", "j"], False)],
    "job list": [(["job", "list"], False)],
    "job show": [(["job", "show", "j"], False)],
    "job checkpoints": [(["job", "checkpoints", "j"], False)],
    "job create": [(["job", "create", "j", "--config", "j.yaml"], True)],
    "job compact": [(["job", "compact", "j"], True)],
    "job skip-lost": [(["job", "skip-lost", "j"], True), (["job", "skip-lost", "j", "--dry-run"], False)],
    "status": [(["status", "j"], False)],
    "metrics": [(["metrics"], False), (["metrics", "--serve", "--port", "0"], False)],
    "store list": [(["store", "list", "j"], False)],
    "store verify": [(["store", "verify", "j", "s"], False)],
    "run": [(["run", "j"], True)],
    "demo": [(["demo"], True)],
    "verify": [(["verify", "j"], True)],
    "rescale": [
        (["rescale", "j", "--factor", "2"], True),
        (["rescale", "j", "--factor", "2", "--dry-run"], False),
        (["rescale", "j", "--factor", " Auto", "--dry-run"], True),  # records the autosizer's decision
    ],
    "watch": [(["watch"], False), (["watch", "--apply"], True)],
    "autosize": [(["autosize", "j"], True), (["autosize", "j", "--no-record"], False)],
    "stop": [(["stop", "j"], True)],
    "sql": [(["sql", "SELECT 1"], False)],
    "lock show": [(["lock", "show", "j"], False)],
    "lock release": [(["lock", "release", "j"], True)],
}


def test_importing_the_cli_and_parsing_loads_no_demo_spark_or_airflow() -> None:
    code = (
        "import json, sys\n"
        "import pipelines.cli\n"
        "parser = pipelines.cli.build_parser()\n"
        "parser.parse_args(['stream', 'produce', 's', '--records', '1', '--keys', '1'])\n"
        "parser.parse_args(['demo'])\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stdout)
    assert "pipelines.cli.table" in loaded  # the probe ran the import it means to check
    assert [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)] == []


def test_every_command_in_the_table_has_an_importable_handler() -> None:
    names = [name for name, _ in actions()]
    assert len(names) == len(set(names))
    for name, command in actions():
        function = handler(command)
        assert callable(function), name
        assert function.__module__.startswith("pipelines.cli."), name


def test_the_table_lists_every_command_the_spec_knows_and_each_parses() -> None:
    assert sorted(COMMAND_LINES) == sorted(name for name, _ in actions())
    parser = build_parser()
    for name, lines in COMMAND_LINES.items():
        for argv, _ in lines:
            args = parser.parse_args(argv)
            assert " ".join(argv).startswith(name)
            assert args.entry is dict(actions())[name]


def test_the_writes_set_is_what_the_parser_applies() -> None:
    parser = build_parser()
    assert {name for name, lines in COMMAND_LINES.items() if any(w for _, w in lines)} == WRITING
    for lines in COMMAND_LINES.values():
        for argv, expected in lines:
            assert writes(parser.parse_args(argv)) is expected, argv


def test_usage_and_help_list_every_command_in_table_order() -> None:
    parser = build_parser()
    order = [entry.name for entry in COMMANDS]
    usage = parser.format_usage()
    assert "{" + ",".join(order) + "}" in usage
    listed = _listed(parser)
    assert listed == order
    for entry in COMMANDS:
        if isinstance(entry, GroupCommand):
            sub = _subparser(parser, entry.name)
            assert "--home" in sub.format_help()  # global options work after every group's name too
            assert _listed(sub) == [c.name for c in entry.subcommands]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (
            ["run", "j", "--available-now", "--continuous"],
            "argument --continuous: not allowed with argument --available-now",
        ),
        (["stream", "create", "s", "--partitions", "0"], "argument --partitions: must be a whole number >= 1, got 0"),
        (["status", "j", "--minutes", "-1"], "argument --minutes: must be a finite number of minutes >= 0, got '-1'"),
        (["stream"], "the following arguments are required: command"),
        (
            ["run", "j", "--master", "bogus://x"],
            "argument --master: Spark master 'bogus://x' is not one Spark starts with: use local, local[N], local[*], "
            "local[N,F], spark://HOST:PORT, k8s://HOST:PORT, yarn or local-cluster[N,C,M]",
        ),
        (
            ["stream", "describe", "s", "--at", "latest"],
            "argument --at: 'latest' is not a time with its zone, such as 2026-11-27T08:00:00Z",
        ),
        (
            ["stream", "describe", "s", "--at", "2026-11-27T08:00"],
            "argument --at: 2026-11-27T08:00:00 has no time zone, so each host would read it in its own: add one (Z "
            "for UTC)",
        ),
        (
            ["stream", "trim", "s", "--older-than", "0s"],
            "argument --older-than: must be positive, got '0s'",
        ),
        (
            ["stream", "trim", "s", "--older-than", "a week"],
            "argument --older-than: must be a duration such as '30s', '15m', '12h' or '7d', got 'a week'",
        ),
        (
            ["stream", "trim", "s", "--older-than", "9999999999999d"],
            "argument --older-than: must be shorter than 999999999 days, got '9999999999999d'",
        ),
        (
            ["stream", "trim", "s", "--older-than", "7d", "--before", "2026-11-27T08:00:00Z"],
            "argument --before: not allowed with argument --older-than",
        ),
        (
            ["sql", "j", "--master", "local[0]"],
            "argument --master: Spark master 'local[0]' asks for no thread: use local[N] with N >= 1, or local[*]",
        ),
        # other digits than 0-9, and numbers past what a 64-bit column holds (pyarrow raised OverflowError)
        (["job", "checkpoints", "j", "--version", "²"], "argument --version: must be a whole number >= 0, got '²'"),
        (["model", "plan", "--containers", "1_0"], "argument --containers: must be a whole number >= 1, got '1_0'"),
        (
            ["model", "export", "--job", "j", "--version", "9223372036854775808"],
            "argument --version: must be a whole number at most 9,223,372,036,854,775,807, got '9223372036854775808'",
        ),
        (
            ["job", "checkpoints", "j", "--version", "999999999999999999999999999999"],
            "argument --version: must be a whole number at most 9,223,372,036,854,775,807, got "
            "'999999999999999999999999999999'",
        ),
        (
            ["stream", "produce", "s", "--records", "9" * 5000, "--keys", "1"],
            f"argument --records: must be a whole number at most 9,223,372,036,854,775,807, got '{'9' * 56}... "
            "(5,002 characters)",
        ),
        # the cap of core.limits: more partitions than a stream can have hung while planning them
        (
            ["model", "plan", "--partitions", "99999999999999999999"],
            "argument --partitions: must be a whole number at most 100,000, got '99999999999999999999'",
        ),
        (
            ["model", "migrate", "--from", "-", "--to-factor", "2", "--partitions", "10000000"],
            "argument --partitions: must be a whole number at most 100,000, got '10000000'",
        ),
        # a window before year 1 had no date; time.sleep(1e300) overflowed
        (
            ["status", "j", "--minutes", "1e12"],
            "argument --minutes: must be at most 5,270,400 minutes (ten years), got '1e12'",
        ),
        (
            ["status", "j", "--minutes", "1e300"],
            "argument --minutes: must be at most 5,270,400 minutes (ten years), got '1e300'",
        ),
        (["status", "j", "--watch", "1e300"], "argument --watch: must be at most 86,400 seconds (a day), got '1e300'"),
        # a reason is stored with the new model and shown on one line (core.limits.check_reason)
        (
            ["rescale", "j", "--factor", "2", "--reason", "x" * 600],
            "argument --reason: reason has 600 characters: at most 500, a sentence or two (it is stored with the new "
            "job model and shown on one line)",
        ),
        (
            ["rescale", "j", "--factor", "auto", "--reason", "late\nnight"],
            "argument --reason: reason holds a newline (U+000A) at character 5: a reason is one line of printable text",
        ),
        (
            ["model", "plan", "--save", "--reason", "\x1b[2J"],
            "argument --reason: reason holds a control character (U+001B) at character 1: a reason is one line of "
            "printable text",
        ),
        (
            ["stream", "describe", "s", "--at", "9999-12-31T23:59:59-14:00"],
            "argument --at: 9999-12-31T23:59:59-14:00 is after 9999-12-31T23:59:59Z, the last time a timestamp can "
            "hold: give an earlier one",
        ),
    ],
)
def test_usage_errors_are_one_error_line_naming_the_command_and_its_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], reason: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    command = "pipelines " + " ".join(a for a in argv[:2] if not a.startswith("-") and a != "j")
    assert err.splitlines() == [f"error: {command}: {reason} (see '{command} --help')"]


def test_container_ids_sort_as_numbers_only_when_written_in_digits_0_to_9() -> None:
    """A Samza model's ``processor-id`` of '²' passed ``str.isdigit`` and ended ``model import`` in ``int()``."""
    from pipelines.cli.output import container_order

    ids = ["10", "2", "²", "x", "9" * 5000]
    assert sorted(ids, key=container_order) == ["2", "10", "9" * 5000, "x", "²"]


def _listed(parser: argparse.ArgumentParser) -> list[str]:
    """The command names ``--help`` lists under the positional arguments, in order."""
    return re.findall(r"^    ([a-z][a-z-]*)\b", parser.format_help(), flags=re.MULTILINE)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise AssertionError(f"no subcommands in {parser.prog}")
