"""Read-side subcommands of `tb-gradscope`: `report`, `check` and `doctor`.

The terminal side only: each module parses its arguments, loads and
concludes through `tb_gradscope.read` (and reads rules files with
`tb_gradscope.rules`) and prints. Each defines `HELP`, `add_arguments(parser)`
and `run(args) -> int`, imports TensorBoard only inside `run` (so `--help` is
instant) and never imports tensorflow. `python -m tb_gradscope.commands` runs
them without the demos; `tb_gradscope.cli` adds the demos on top. Imported by
`tb_gradscope.cli` only.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tb_gradscope.commands import dispatch

READ_COMMANDS = {
    "report": "tb_gradscope.commands.report",
    "check": "tb_gradscope.commands.check",
    "doctor": "tb_gradscope.commands.doctor",
}


def build_parser() -> argparse.ArgumentParser:
    """A parser with the `report`, `check` and `doctor` subcommands."""
    return dispatch.build_parser(READ_COMMANDS, "Read-side tools for gradscope logs.")


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` and runs `report`, `check` or `doctor`; returns the exit status."""
    args = build_parser().parse_args(argv)
    return dispatch.run_command(args)
