"""Trains a PyTorch corpus shape with the oracle watching, and judges its blocked edges' origins.

`train(shape, root)` gives the TF corpus's `TrainedShape` (same truths, same
drift truths), so its `ProductView` and `compare_*` functions
(tests/support/corpus/harness.py) read the run back and compare it: they
know logs, not frameworks. What is PyTorch's own is here: the observer that
runs the torch oracle, and `cut_origin_disagreements`, which holds each
blocked edge's cause and source line to the shape's declaration.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil

import numpy as np

from tests.support import torch_corpus
from tests.support.corpus import harness as corpus_harness
from tests.support.corpus import oracle as truth_lib
from tests.support.corpus.harness import Disagreement, ProductView, TrainedShape
from tests.support.torch_corpus import oracle
from tests.support.torch_corpus.spec import PairProbe, Shape, StepProbe

__all__ = ["ProductView", "TrainedShape", "all_shapes", "cut_origin_disagreements", "train"]


def all_shapes() -> list[Shape]:
    """Every shape of the `shapes_*` modules, in module order."""
    shapes: list[Shape] = []
    for module in sorted(m.name for m in pkgutil.iter_modules(torch_corpus.__path__)):
        if module.startswith("shapes_"):
            shapes += importlib.import_module(f"tests.support.torch_corpus.{module}").SHAPES
    return shapes


class OracleObserver:
    """The harness side of `spec.Observer`: the torch oracle at recorded steps,
    the pairs' values before and after every step for the drift recomputation."""

    def __init__(self, shape: Shape):
        self._recorded = set(shape.recorded_steps)
        self._silence = truth_lib.except_via_patterns(shape.rules)
        self._probe: StepProbe | None = None
        self.truths: dict[int, truth_lib.StepTruth] = {}
        self.pair_values: dict[int, dict[str, tuple[list, list]]] = {}  # after each step
        self.pair_start: dict[int, dict[str, tuple[list, list]]] = {}  # before each step
        self.pairs: dict[str, PairProbe] = {}

    def before(self, step: int, probe: StepProbe) -> None:
        self._probe = probe
        self.pair_start[step] = self._pair_values(probe)
        if step not in self._recorded or step in self.truths:
            return
        truth = oracle.torch_truth(probe)
        if self._silence:
            silenced = {p: oracle.silenced_truth(probe, p) for p in self._silence}
            truth = dataclasses.replace(truth, silenced=silenced)
        self.truths[step] = truth

    def after(self, drift_step: int) -> None:
        probe = self._probe
        if probe is None or not probe.pairs:
            return
        self.pair_values[drift_step] = self._pair_values(probe)

    def _pair_values(self, probe: StepProbe) -> dict[str, tuple[list, list]]:
        values = {}
        with oracle.unobserved():
            for pair in probe.pairs:
                self.pairs[pair.name] = pair
                values[pair.name] = (
                    [_numpy(t) for t in pair.target.values()],
                    [_numpy(o) for o in pair.online],
                )
        return values

    def drift_truths(self) -> dict[int, dict[str, truth_lib.DriftTruth]]:
        """Drift and tau at each step, tau from the target before that step
        (the state the step started from, known at step 0 too)."""
        out: dict[int, dict[str, truth_lib.DriftTruth]] = {}
        for step, per_pair in self.pair_values.items():
            for name, (t, o) in per_pair.items():
                before = self.pair_start.get(step, {}).get(name)
                out.setdefault(step, {})[name] = truth_lib.drift_truth(
                    self.pairs[name], t, o, before[0] if before else None
                )
        return out


def _numpy(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy().copy()


def train(shape: Shape, root: str) -> TrainedShape:
    """Trains `shape` once into `root/<shape.name>/<shape.name>` with the oracle watching."""
    logdir = os.path.join(root, shape.name)
    observer = OracleObserver(shape)
    shape.train(os.path.join(logdir, shape.name), observer)
    return TrainedShape(shape, logdir, observer.truths, observer.drift_truths())


def cut_origin_disagreements(trained: TrainedShape, view: ProductView) -> list[Disagreement]:
    """Every blocked edge matches a cut the shape declares (its `cause`, and
    the PyTorch call in its `op_name`), every declared cut is some edge's, and
    every edge names a source line inside the shape's own file (the user's
    line that cut, not the recorder's)."""
    flowgraph = view.route("flowgraph")["flowgraph"] or {}
    edges = flowgraph.get("blocked_edges", [])
    shape = trained.shape
    home = os.path.basename(inspect.getsourcefile(shape.train) or "")

    def matches(edge, cut):
        return edge.get("cause") == cut[0] and cut[1].lower() in str(edge.get("op_name")).lower()

    out = []
    for e in edges:
        where = f"{e['producer_scope']} -> {e['consumer_scope']}"
        if not any(matches(e, cut) for cut in shape.causes):
            got = (e.get("cause"), e.get("op_name"))
            out.append(Disagreement("cut_cause", None, e["loss"], where, got, shape.causes))
        source = e.get("source") or {}
        if not str(source.get("file", "")).endswith(home):
            out.append(
                Disagreement("cut_source", None, e["loss"], where, source, f"a line of {home}")
            )
    for cut in shape.causes:
        if not any(matches(e, cut) for e in edges):
            out.append(Disagreement("cut_cause", None, "*", "*", "absent", cut))
    return out


# The read-side comparisons, shared with the TF corpus.
matrix_disagreements = corpus_harness.matrix_disagreements
report_disagreements = corpus_harness.report_disagreements
rules_verdict = corpus_harness.rules_verdict
blocked_edge_disagreements = corpus_harness.blocked_edge_disagreements
path_cut_disagreements = corpus_harness.path_cut_disagreements
drift_disagreements = corpus_harness.drift_disagreements
