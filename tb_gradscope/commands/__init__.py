"""Read-side subcommands of `tb-gradscope`: `report` and `check`.

Each module defines `HELP`, `add_arguments(parser)`, `add_parser(subparsers)`
and `run(args) -> int`, and imports TensorBoard only inside `run`, so
`--help` is instant. None imports tensorflow. `python -m tb_gradscope.commands`
runs them without the top-level `tb-gradscope` dispatcher.
"""

from __future__ import annotations

import argparse
from typing import Sequence

COMMAND_MODULES = ("report", "check")


def build_parser() -> argparse.ArgumentParser:
    """A parser with the `report` and `check` subcommands."""
    import importlib

    parser = argparse.ArgumentParser(prog="tb-gradscope", description="Read-side tools for gradscope logs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"tb_gradscope.commands.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` and runs `report` or `check`; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.run(args)
