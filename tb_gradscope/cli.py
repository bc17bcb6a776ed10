"""The `tb-gradscope` command: a thin dispatcher over one module per subcommand.

Each subcommand module defines `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`, and imports nothing heavy at module level so `--help` is
instant. Adding a command is one line in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Mapping, Sequence

from tb_gradscope import __version__

# name -> module implementing it.
COMMANDS = {
    "demo": "tb_gradscope.demos.command",
    "report": "tb_gradscope.commands.report",
    "check": "tb_gradscope.commands.check",
    "doctor": "tb_gradscope.commands.doctor",
}


def build_parser(
    commands: Mapping[str, str] = COMMANDS,
    description: str = "See which subgraphs each loss updates: demos and log tools "
    "for the Gradscope TensorBoard tab.",
) -> argparse.ArgumentParser:
    """The parser for `commands` ({name: module}; default: every command)."""
    parser = argparse.ArgumentParser(prog="tb-gradscope", description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in commands.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


# Exit status when a command could not read or do what was asked (also bad
# usage); report and check use 1 for "violations found" only.
FAILED = 2
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` (default: sys.argv[1:]) and runs the chosen command."""
    args = build_parser().parse_args(argv)
    return run_command(args)


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


if __name__ == "__main__":
    sys.exit(main())
