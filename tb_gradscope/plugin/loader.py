"""How TensorBoard finds and configures the Gradscope plugin.

Named by the `tensorboard_plugins` entry point. `fix_flags` runs before the data
backend starts and raises the retention of gradscope series: without it the
Python backend keeps 10 points per tag and the Rust data server 100 tensors /
10 blob steps. Importing this module is cheap and never imports tensorflow.
"""

from __future__ import annotations

import argparse

from tensorboard.plugins import base_plugin

from tb_gradscope.format import PLUGIN_NAME
from tb_gradscope.read.reader import DEFAULT_SAMPLES

FLAG = "gradscope_samples"


class GradscopeLoader(base_plugin.TBLoader):
    """Adds --gradscope_samples and loads GradscopePlugin."""

    def define_flags(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group(PLUGIN_NAME)
        group.add_argument(
            f"--{FLAG}",
            metavar="N",
            type=int,
            default=None,
            help=(
                f"Steps kept per gradscope series (tag), for both data backends "
                f"(default: {DEFAULT_SAMPLES}; 0 keeps every step, with unbounded "
                "memory). Memory is about N x scopes x columns x 4 bytes per series. "
                "Takes precedence over --samples_per_plugin=gradscope=N."
            ),
        )

    def fix_flags(self, flags: argparse.Namespace) -> None:
        value = getattr(flags, FLAG, None)
        if value is not None and value < 0:
            raise base_plugin.FlagsError(f"--{FLAG} must be >= 0 (0 keeps every step), got {value}")
        hints = getattr(flags, "samples_per_plugin", None)
        if not isinstance(hints, dict):
            hints = _parse_hints(hints or "")
            flags.samples_per_plugin = hints
        if value is not None:
            hints[PLUGIN_NAME] = value
        else:
            hints.setdefault(PLUGIN_NAME, DEFAULT_SAMPLES)

    def load(self, context: base_plugin.TBContext) -> base_plugin.TBPlugin:
        from tb_gradscope.plugin.plugin import GradscopePlugin

        return GradscopePlugin(context)


def _parse_hints(text: str) -> dict[str, int]:
    """`a=1,b=2` -> {"a": 1, "b": 2}, as TensorBoard parses --samples_per_plugin."""
    hints = {}
    for token in str(text).split(","):
        if token.strip():
            key, sep, count = token.strip().partition("=")
            try:
                hints[key] = int(count)
            except ValueError:
                raise base_plugin.FlagsError(
                    f"--samples_per_plugin entry {token!r} is not plugin=N"
                ) from None
    return hints
