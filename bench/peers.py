"""The loggers users write by hand instead of tb_gradscope, and the check that
every timed candidate wrote what it claims.

Not a benchmark itself (run_all runs only bench_*.py): `user_steps` puts these
loggers on its models and `bench_overhead` times them. Loggers (`HAND_LOGGERS`),
each writing at every `every`-th train step:
  - `hand_scalar_*`: per-variable gradient L2 (`tf.norm`) + the global norm,
    one `tf.summary.scalar` each;
  - `hand_hist_*`: a `tf.summary.histogram` of every gradient and every weight;
  - `tf_agents`: TF-Agents' `summarize_grads_and_vars` (`add_variables_summaries`
    + `add_gradients_summaries`: per variable a value histogram, the value's
    norm, a gradient histogram and the gradient's norm), gated by
    `tf.summary.record_if` as TF-Agents' train loops gate it;
  - `*_host`: picked on the host, a second `tf.function` that logs called every
    `every` steps; `*_cond`: one `tf.function`, the summaries in a `tf.cond`.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable

import tensorflow as tf

HAND_LOGGERS = (
    "hand_scalar_host",
    "hand_scalar_cond",
    "hand_hist_host",
    "hand_hist_cond",
    "tf_agents",
)


def summaries(kind: str, grads: list, variables: list, names: list[str]) -> None:
    """Writes logger `kind`'s summaries (inside a writer's default and step)."""
    if kind == "scalar":
        for name, g in zip(names, grads):
            tf.summary.scalar(f"grad_norm/{name}", tf.norm(g))
        tf.summary.scalar("grad_norm/global", tf.linalg.global_norm(grads))
    elif kind == "hist":
        for name, g, v in zip(names, grads, variables):
            tf.summary.histogram(f"grad/{name}", g)
            tf.summary.histogram(f"weight/{name}", v)
    else:
        for name, g, v in zip(names, grads, variables):
            tf.summary.histogram(f"{name}_value", v)
            tf.summary.scalar(f"{name}_value_norm", tf.linalg.global_norm([v]))
            tf.summary.histogram(f"{name}_gradient", g)
            tf.summary.scalar(f"{name}_gradient_norm", tf.linalg.global_norm([g]))


def summary_tags(kind: str, names: list[str], scope: str = "") -> frozenset[str]:
    """The tags `summaries(kind, ...)` writes for variables `names` under name
    scope `scope` (a `tf.cond` branch's is "cond/": summary tags carry it)."""
    if kind == "scalar":
        tags = [f"grad_norm/{n}" for n in names] + ["grad_norm/global"]
    elif kind == "hist":
        tags = [f"grad/{n}" for n in names] + [f"weight/{n}" for n in names]
    else:
        tags = [
            f"{n}_{part}"
            for n in names
            for part in ("value", "value_norm", "gradient", "gradient_norm")
        ]
    return frozenset(scope + t for t in tags)


def variable_names(variables: list) -> list[str]:
    return [v.path.replace(":", "_") for v in variables]


@dataclasses.dataclass(frozen=True)
class Claim:
    """What a candidate says it writes under `logdir`: each of `tags` at every
    `every`-th of its steps (`steps_per_run` per run), once;
    `exact`: and no other tag. `close` flushes its writer."""

    logdir: str
    tags: frozenset[str]
    steps_per_run: int
    every: int = 10
    exact: bool = True
    close: Callable[[], object] = lambda: None


def written(logdir: str) -> dict[str, list[int]]:
    """Every tag under `logdir` (event files at any depth) -> the steps it was written at."""
    found: dict[str, list[int]] = {}
    for path in glob.glob(os.path.join(logdir, "**", "events.out.tfevents.*"), recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append(event.step)
    return found


def check(claims: dict[str, Claim], runs_done: int) -> None:
    """Raises AssertionError unless every candidate wrote each claimed tag at
    each due step of its `runs_done` runs, once (closing the writers first)."""
    for claim in claims.values():
        claim.close()
    for label, claim in claims.items():
        tags = written(claim.logdir)
        missing = sorted(claim.tags - set(tags))
        assert not missing, f"{label} wrote no {missing[:3]} under {claim.logdir}"
        extra = sorted(set(tags) - claim.tags)
        assert not (claim.exact and extra), f"{label} wrote {extra[:3]}, which it does not claim"
        due = len(range(0, claim.steps_per_run * runs_done, claim.every))
        for tag in claim.tags:
            steps = tags[tag]
            assert len(steps) == len(set(steps)) == due and all(
                s % claim.every == 0 for s in steps
            ), f"{label} wrote {tag} at {len(steps)} steps ({sorted(steps)[:4]} ...), {due} due"


class HandLogger:
    """One hand-written logger (`label` from HAND_LOGGERS) over `variables`,
    stepped by the integer variable `step` (the train step, read in the graph)."""

    def __init__(
        self, label: str, logdir: str, variables: list, step: tf.Variable, every: int = 10
    ):
        self.kind = label.split("_")[1] if label.startswith("hand_") else "tf_agents"
        self.host = label.endswith("_host")
        self.logdir, self.step, self.every = logdir, step, every
        self.names = variable_names(variables)
        self.writer = tf.summary.create_file_writer(logdir)

    def _always(self, grads: list, variables: list) -> None:
        with self.writer.as_default(step=self.step):
            summaries(self.kind, grads, variables, self.names)

    def _gated(self, grads: list, variables: list) -> None:
        due = tf.equal(self.step % self.every, 0)
        if self.kind == "tf_agents":
            with self.writer.as_default(step=self.step), tf.summary.record_if(due):
                summaries(self.kind, grads, variables, self.names)
        else:
            tf.cond(due, lambda: self._always(grads, variables), lambda: None)

    def train_step(self, make_step: Callable[[Callable | None], Callable]) -> Callable:
        """The step to time: `make_step(log)` is the user's step calling
        `log(grads, variables)` (when not None) before its own step advances."""
        if not self.host:
            return tf.function(make_step(self._gated))
        plain, logged = tf.function(make_step(None)), tf.function(make_step(self._always))
        calls = [0]

        def step(*batch):
            fn = logged if calls[0] % self.every == 0 else plain
            calls[0] += 1
            return fn(*batch)

        return step

    def claim(self, steps_per_run: int) -> Claim:
        scope = "" if self.host or self.kind == "tf_agents" else "cond/"
        return Claim(
            self.logdir,
            summary_tags(self.kind, self.names, scope),
            steps_per_run,
            self.every,
            close=self.writer.close,
        )
