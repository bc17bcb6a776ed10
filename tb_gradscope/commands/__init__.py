"""Read-side subcommands of `tb-gradscope`: `report`, `check` and `doctor`.

Each module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`,
and imports TensorBoard only inside `run`, so `--help` is instant. None imports
tensorflow. `python -m tb_gradscope.commands` runs them without the demos, with
the same parser as the `tb-gradscope` dispatcher (`tb_gradscope.cli`).
"""

from __future__ import annotations

import argparse
from typing import Sequence

from tb_gradscope import cli

READ_COMMANDS = {name: cli.COMMANDS[name] for name in ("report", "check", "doctor")}


def build_parser() -> argparse.ArgumentParser:
    """A parser with the `report`, `check` and `doctor` subcommands."""
    return cli.build_parser(READ_COMMANDS, "Read-side tools for gradscope logs.")


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` and runs `report`, `check` or `doctor`; returns the exit status."""
    args = build_parser().parse_args(argv)
    return cli.run_command(args)
