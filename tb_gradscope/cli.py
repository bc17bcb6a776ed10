"""The `tb-gradscope` command: the demos and the read-side commands under one parser.

Adding a command is one line in COMMANDS (a module defining `HELP`,
`add_arguments(parser)` and `run(args) -> int`, see `tb_gradscope.commands.dispatch`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tb_gradscope.commands import READ_COMMANDS, dispatch

# name -> module implementing it.
COMMANDS = {"demo": "tb_gradscope.demos.command", **READ_COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The parser with every command."""
    return dispatch.build_parser(
        COMMANDS,
        "See which subgraphs each loss updates: demos and log tools for the Gradscope TensorBoard tab.",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` (default: sys.argv[1:]) and runs the chosen command."""
    args = build_parser().parse_args(argv)
    return dispatch.run_command(args)


if __name__ == "__main__":
    sys.exit(main())
