"""`tb-gradscope demo LOGDIR`: train the demos into a TensorBoard logdir.

Imports no tensorflow until the command runs, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tb_gradscope.demos import envs, spec

HELP = "train the demo models (a clean and a leaky twin each) into LOGDIR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Trains small, seeded CPU models of the seed scenarios, each as a clean run "
        "and a deliberately leaky twin, into LOGDIR/<demo>/<twin>. Then: "
        "tensorboard --logdir LOGDIR, and open the Gradscope tab."
    )
    parser.epilog = "demos: " + "; ".join(spec.DEMO_NAMES)
    parser.add_argument("logdir", metavar="LOGDIR", help="where the runs are written")
    parser.add_argument(
        "--only",
        metavar="NAME",
        nargs="+",
        choices=spec.DEMO_NAMES,
        default=[],
        help="run only these demos (default: all)",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        metavar="N",
        help="optimizer steps per run (default: each demo's own, a few hundred)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace runs an earlier `demo` left in LOGDIR (default: refuse)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=spec.DEFAULT_SEED,
        help="random seed of every run (default: %(default)s)",
    )
    parser.add_argument(
        "--env",
        choices=envs.ENV_CHOICES,
        default=envs.AUTO,
        help="CartPole for the RL demos: gymnasium's when installed (auto), "
        "or the built-in one (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    # TensorFlow's C++ start-up chatter would bury the progress bars.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tb_gradscope.demos.runner import RULES_FILE, run_demos

    started = time.perf_counter()
    try:
        reports = run_demos(
            args.logdir,
            only=args.only,
            steps=args.steps,
            seed=args.seed,
            env=args.env,
            overwrite=args.overwrite,
        )
    except (FileExistsError, ValueError) as e:
        print(f"tb-gradscope demo: error: {e}", file=sys.stderr)
        return 2
    for r in reports:
        losses = ", ".join(f"{k}={v:.4g}" for k, v in r.result.losses.items())
        note = f" ({r.result.note})" if r.result.note else ""
        print(f"{r.run_dir}: {r.steps} steps in {r.seconds:.1f}s, {losses}{note}")
    print(
        f"{len(reports)} runs in {time.perf_counter() - started:.1f}s; "
        f"view with: tensorboard --logdir {args.logdir}"
    )
    if reports:
        demo_dir = os.path.dirname(reports[0].run_dir)
        print(
            f"see what a leaky twin breaks: tb-gradscope check {demo_dir} "
            f"--rules {os.path.join(demo_dir, RULES_FILE)}"
        )
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of steps, got {value}")
    return value
