"""One parser over subcommand modules, and the last line of defence around them.

Each subcommand module defines `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`, and imports nothing heavy at module level so `--help` is
instant. `tb_gradscope.cli` (every command) and `python -m
tb_gradscope.commands` (the read-side ones) both build their parser here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping

from tb_gradscope import __version__

# Exit status when a command could not read or do what was asked (also bad
# usage); report and check use 1 for "violations found" only.
FAILED = 2
INTERRUPTED = 130


def build_parser(commands: Mapping[str, str], description: str) -> argparse.ArgumentParser:
    """The `tb-gradscope` parser for `commands` ({name: module implementing it})."""
    parser = argparse.ArgumentParser(prog="tb-gradscope", description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in commands.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Runs a parsed command; never lets a traceback reach the user.

    Commands report what they expect (a missing logdir, a broken rules file)
    themselves. Anything else (damage no reader knows yet, a bug) becomes
    one line naming the command and the error, and exit status 2, so a CI
    job tells it apart from "violations found" (1)."""
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print(f"tb-gradscope {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as e:  # noqa: BLE001 - the last line of defence
        from tb_gradscope.commands.text import safe  # names from logs are text

        text = safe(" ".join(str(e).split())[:300])
        print(
            f"tb-gradscope {args.command}: could not finish: {type(e).__name__}: {text}; "
            "this is a tb-gradscope bug or damage it does not know yet: please report it",
            file=sys.stderr,
        )
        return FAILED
