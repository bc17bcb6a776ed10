"""Runs a corpus shape with the product and holds what the product concludes
against what the oracle computed on the same run.

`train(shape, root)` trains the shape once (the product recording, the oracle
observing every recorded step); `ProductView` reads the run back the three
ways a user does: the plugin's `matrix` and `series` routes (werkzeug's test
client over TensorBoard's WSGI app, Python data provider), `tb-gradscope
report --format json` and `tb-gradscope check`, both in-process. The
`compare_*` functions return disagreements as plain records, so a failing test
lists every one of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from tests.support.corpus import oracle
from tests.support.corpus.spec import PairProbe, Shape, StepProbe, TF1Probe

ABSENT = "absent"
NO_GRADIENT = "no_gradient"
PLUGIN_PREFIX = "/data/plugin/gradscope/"
DRIFT_TOLERANCE = 1e-4  # float32 in-graph sums vs float64 numpy, relative


@dataclasses.dataclass
class TrainedShape:
    """One shape's run and the oracle's truth about it.

    Attributes:
      shape: the shape.
      logdir: the TensorBoard logdir; the run is `shape.name` below it.
      truths: recorded step -> the oracle's StepTruth.
      drifts: drift step -> pair name -> the numpy drift/tau per target scope.
    """

    shape: Shape
    logdir: str
    truths: dict[int, oracle.StepTruth]
    drifts: dict[int, dict[str, oracle.DriftTruth]]

    @property
    def run(self) -> str:
        return self.shape.name


@dataclasses.dataclass(frozen=True)
class Disagreement:
    """The product and the oracle disagree on one cell (or one number)."""

    where: str  # "matrix", "report", "check", "blocked_edges", "drift"
    step: int | None
    loss: str
    scope: str
    product: Any
    oracle: Any

    def __str__(self) -> str:
        at = "" if self.step is None else f" step {self.step}"
        return f"{self.where}{at} ({self.loss}, {self.scope}): product {self.product!r}, oracle {self.oracle!r}"


class OracleObserver:
    """The harness side of `spec.Observer`: runs the oracle at recorded steps,
    keeps the pairs' values after every step for the drift recomputation."""

    def __init__(self, shape: Shape):
        self._recorded = set(shape.recorded_steps)
        self._silence = oracle.except_via_patterns(shape.rules)
        self._tf1 = oracle.TF1Oracle()
        self._probe: StepProbe | TF1Probe | None = None
        self.truths: dict[int, oracle.StepTruth] = {}
        self.pair_values: dict[int, dict[str, tuple[list, list]]] = {}
        self.pairs: dict[str, PairProbe] = {}
        self._from_start = shape.drift_from_start
        self._initial: dict[str, tuple[list, list]] | None = None  # the pairs before step 0

    def prepare(self, probe: TF1Probe) -> None:
        self._tf1.prepare(probe)

    def before(self, step: int, probe: StepProbe | TF1Probe) -> None:
        self._probe = probe
        if self._initial is None and self._from_start and not isinstance(probe, TF1Probe):
            self._initial = self._pair_values(probe)
        if step not in self._recorded or step in self.truths:
            return
        if isinstance(probe, TF1Probe):
            self.truths[step] = self._tf1.truth(probe)
        else:
            self.truths[step] = oracle.tf2_truth(probe)
        if self._silence:
            silenced = {p: oracle.silenced_truth(probe, p) for p in self._silence}
            self.truths[step] = dataclasses.replace(self.truths[step], silenced=silenced)

    def after(self, drift_step: int) -> None:
        probe = self._probe
        if probe is None or not probe.pairs:
            return
        self.pair_values[drift_step] = self._pair_values(probe)

    def _pair_values(self, probe: StepProbe | TF1Probe) -> dict[str, tuple[list, list]]:
        """Each pair's (target, online) values now, copied."""
        values = {}
        for pair in probe.pairs:
            self.pairs[pair.name] = pair
            targets = list(pair.target.values())
            if isinstance(probe, TF1Probe):
                t, o = probe.session.run([targets, list(pair.online)])
            else:
                t = [np.asarray(v.numpy()) for v in targets]
                o = [np.asarray(v.numpy()) for v in pair.online]
            values[pair.name] = (
                [np.array(x, copy=True) for x in t],
                [np.array(x, copy=True) for x in o],
            )
        return values

    def drift_truths(self) -> dict[int, dict[str, oracle.DriftTruth]]:
        out: dict[int, dict[str, oracle.DriftTruth]] = {}
        first = min(self.pair_values, default=None)
        for step, per_pair in self.pair_values.items():
            for name, (t, o) in per_pair.items():
                before = self.pair_values.get(step - 1, {}).get(name)
                if before is None and step == first and self._initial is not None:
                    before = self._initial.get(name)  # the pairs as initialised
                out.setdefault(step, {})[name] = oracle.drift_truth(
                    self.pairs[name], t, o, before[0] if before else None
                )
        return out


def train(shape: Shape, root: str) -> TrainedShape:
    """Trains `shape` once into `root/<shape.name>/<shape.name>` with the oracle watching."""
    logdir = os.path.join(root, shape.name)
    observer = OracleObserver(shape)
    shape.train(os.path.join(logdir, shape.name), observer)
    return TrainedShape(shape, logdir, observer.truths, observer.drift_truths())


# ----- what the product concludes ----------------------------------------------


class ProductView:
    """The product's conclusions about one trained shape, read once, lazily."""

    def __init__(self, trained: TrainedShape):
        self.trained = trained
        self._client = None
        self._reports: dict[int | None, dict] = {}
        self._check: tuple[int, str, str] | None = None

    # plugin routes
    def client(self):
        if self._client is None:
            from tensorboard.backend import application
            from tensorboard.plugins import base_plugin
            from werkzeug import test as werkzeug_test

            from tb_gradscope.plugin.plugin import GradscopePlugin
            from tests.support import providers

            samples = {"gradscope": 10_000}
            provider = providers.python_provider(self.trained.logdir, samples)
            plugin = GradscopePlugin(
                base_plugin.TBContext(data_provider=provider, sampling_hints=samples)
            )
            self._client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))
        return self._client

    def route(self, route: str, **params: Any) -> dict:
        response = self.client().get(
            PLUGIN_PREFIX + route, query_string={"run": self.trained.run, **params}
        )
        body = response.get_data(as_text=True)
        if response.status_code != 200:
            raise AssertionError(f"{route} {params} answered {response.status_code}: {body}")
        return json.loads(body)

    def matrix(self, step: int) -> dict:
        return self.route("matrix", step=step)

    def drift_series(self, pair: str, scope: str, stat: str) -> dict[int, float | None]:
        points = self.route("series", kind="drift", name=pair, scope=scope, stat=stat)["points"]
        return {int(s): _number(v) for s, _, v in points}

    # the CLI, in-process
    def report(self, step: int | None = None) -> dict:
        if step not in self._reports:
            from tb_gradscope.commands import report

            out, err = io.StringIO(), io.StringIO()
            args = argparse.Namespace(
                logdir=self.trained.logdir,
                run_name=self.trained.run,
                step=step,
                format="json",
                rules=None,
            )
            code = report.run(args, out=out, err=err)
            if code != 0:
                raise AssertionError(f"report --step {step} exited {code}: {err.getvalue()}")
            (self._reports[step],) = json.loads(out.getvalue())["runs"]
        return self._reports[step]

    def check(self) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of `tb-gradscope check LOGDIR`."""
        if self._check is None:
            from tb_gradscope.commands import check

            out, err = io.StringIO(), io.StringIO()
            args = argparse.Namespace(
                logdir=self.trained.logdir, rules=None, run_name=self.trained.run
            )
            self._check = (check.run(args, out=out, err=err), out.getvalue(), err.getvalue())
        return self._check


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value)


# ----- comparisons ---------------------------------------------------------------


def compare_states(
    trained: TrainedShape, where: str, step: int, cells: Mapping[str, Mapping[str, Any]]
) -> list[Disagreement]:
    """Every (loss, scope) state of the product at `step` against the oracle.

    `cells[loss][scope]` is the product's cell (with `state`). A `no_gradient`
    cell agrees only when the shape has no FlowGraph by design and the oracle
    says blocked or independent.
    """
    truth = trained.truths[step]
    out = []
    for loss in sorted(set(truth.states) | set(cells)):
        expected = truth.states.get(loss, {})
        got = {scope: cell["state"] for scope, cell in cells.get(loss, {}).items()}
        for scope in sorted(set(expected) | set(got)):
            want, have = expected.get(scope, ABSENT), got.get(scope, ABSENT)
            if want == have:
                continue
            if (
                have == NO_GRADIENT
                and not trained.shape.has_flowgraph
                and want in (oracle.BLOCKED, oracle.INDEPENDENT)
            ):
                continue
            out.append(Disagreement(where, step, loss, scope, have, want))
    return out


def matrix_disagreements(trained: TrainedShape, view: ProductView) -> list[Disagreement]:
    out = []
    for step in sorted(trained.truths):
        out += compare_states(trained, "matrix", step, view.matrix(step)["cells"])
    return out


def report_disagreements(trained: TrainedShape, view: ProductView) -> list[Disagreement]:
    out = []
    for step in sorted(trained.truths):
        report = view.report(step)
        if report["step"] != step:
            out.append(
                Disagreement("report", step, "*", "*", f"step {report['step']}", f"step {step}")
            )
            continue
        out += compare_states(trained, "report", step, report["cells"])
    return out


def rules_verdict(trained: TrainedShape) -> dict[str, bool]:
    """Each of the shape's never/only/blocked rules: does it hold at every
    recorded step in the oracle that has its loss (and is there one)?"""
    verdict = {}
    for rule in trained.shape.rules:
        if rule.strip().startswith("tracks"):
            continue
        judged = [oracle.rule_holds(rule, t) for t in trained.truths.values()]
        judged = [j for j in judged if j is not None]
        verdict[rule] = bool(judged) and all(judged)
    return verdict


def blocked_edge_disagreements(trained: TrainedShape, view: ProductView) -> list[Disagreement]:
    """Every leaf scope the oracle finds blocked for a loss must be cut in the
    FlowGraph's scope graph: a blocked edge of that loss lies downstream of it
    (its producer scope is the scope or one it feeds), and no path of edges
    left open for that loss leads from it to `loss:<name>` without passing
    through a scope the loss's gradient does reach. (A scope graph joins every
    call of a scope: SAC's policy feeds the online critic for the policy loss,
    and that critic feeds the Q loss on another call, so policy -> critic ->
    Q loss is a path of the graph that no tensor takes.)"""
    flowgraph = view.route("flowgraph")["flowgraph"] or {}
    edges = flowgraph.get("edges", [])
    blocked = flowgraph.get("blocked_edges", [])
    step = max(trained.truths)
    truth = trained.truths[step]
    out = []
    for loss in sorted(truth.states):
        producers = {e["producer_scope"] for e in blocked if e["loss"] == loss}
        reached = {
            sc for sc, st in truth.states[loss].items() if st in (oracle.UPDATES, oracle.IGNORED)
        }
        live = [
            (e["src"], e["dst"])
            for e in edges
            if loss not in e["blocked_for"] and e["src"] not in reached
        ]
        every = [(e["src"], e["dst"]) for e in edges]
        for leaf in sorted(truth.blocked_producers(loss)):
            if not producers & _reachable(leaf, every):
                out.append(
                    Disagreement(
                        "blocked_edges",
                        step,
                        loss,
                        leaf,
                        sorted(producers),
                        f"a blocked edge downstream of {leaf}",
                    )
                )
            if f"loss:{loss}" in _reachable(leaf, live):
                out.append(
                    Disagreement(
                        "blocked_edges",
                        step,
                        loss,
                        leaf,
                        f"open path to loss:{loss}",
                        "every path cut",
                    )
                )
    return out


def path_cut_disagreements(trained: TrainedShape, view: ProductView) -> list[Disagreement]:
    """Per-path cuts, for the scopes the shape's `except_via` rules silence:
    where the oracle finds that a loss reaches a leaf scope (the gradient
    arrives) but, with the paths through x silenced, depends on it with no
    gradient (a path avoiding x is cut), the FlowGraph has a blocked edge of
    that loss with the open path beside it from the scope or one it feeds
    (where the cut value leaves the encoder's last layer); and every open path
    a blocked edge shows starts at its producer scope, ends at the loss, and
    leaves from a scope the oracle says the loss's gradient reaches."""
    flowgraph = view.route("flowgraph")["flowgraph"] or {}
    blocked = flowgraph.get("blocked_edges", [])
    every = [(e["src"], e["dst"]) for e in flowgraph.get("edges", [])]
    step = max(trained.truths)
    truth = trained.truths[step]
    out = []
    for pattern, silenced in sorted(truth.silenced.items()):
        for loss in sorted(truth.states):
            for leaf in sorted({oracle.leaf_scope(name) for name in truth.facts[loss]}):
                if oracle.under(leaf, pattern) or truth.states[loss][leaf] not in (
                    oracle.UPDATES,
                    oracle.IGNORED,
                ):
                    continue
                if silenced.states[loss][leaf] != oracle.BLOCKED:
                    continue
                downstream = _reachable(leaf, every)
                cuts = [e for e in blocked if e["loss"] == loss and e.get("open_path")]
                if not any(e["producer_scope"] in downstream for e in cuts):
                    out.append(
                        Disagreement(
                            "path_cuts",
                            step,
                            loss,
                            leaf,
                            sorted(e["producer_scope"] for e in cuts),
                            f"a per-path cut downstream of {leaf}, beside the path through {pattern}",
                        )
                    )
    for e in blocked:
        path = e.get("open_path") or []
        if not path:
            continue
        states = truth.states.get(e["loss"], {})
        if (
            path[0] != e["producer_scope"]
            or path[-1] != f"loss:{e['loss']}"
            or states.get(e["producer_scope"]) not in (oracle.UPDATES, oracle.IGNORED)
        ):
            out.append(
                Disagreement(
                    "open_path",
                    step,
                    e["loss"],
                    e["producer_scope"],
                    path,
                    f"a path the gradient takes (state {states.get(e['producer_scope'])})",
                )
            )
    return out


def _reachable(start: str, edges: list[tuple[str, str]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        for src, dst in edges:
            if src == node and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return seen


def drift_disagreements(trained: TrainedShape, view: ProductView) -> list[Disagreement]:
    """Drift and effective tau of every pair at every drift step the product
    recorded, against the numpy recomputation (NaN must be NaN)."""
    out = []
    names = {name for per in trained.drifts.values() for name in per}
    for name in sorted(names):
        scopes = next(per[name] for per in trained.drifts.values() if name in per).drift
        for scope in sorted(scopes):
            for stat in ("drift", "tau"):
                try:
                    series = view.drift_series(name, scope, stat)
                except AssertionError as e:
                    out.append(
                        Disagreement("drift", None, name, scope, str(e)[:120], f"a {stat} series")
                    )
                    continue
                if not series:
                    out.append(
                        Disagreement("drift", None, name, scope, "no points", f"{stat} series")
                    )
                for step, have in sorted(series.items()):
                    truth = trained.drifts.get(step, {}).get(name)
                    if truth is None:
                        out.append(
                            Disagreement(
                                "drift", step, name, scope, have, "no target update read here"
                            )
                        )
                        continue
                    want = getattr(truth, stat)[scope]
                    if not _close(have, want):
                        out.append(Disagreement(f"drift:{stat}", step, name, scope, have, want))
    return out


def _close(have: float | None, want: float) -> bool:
    if have is None or math.isnan(have):
        return math.isnan(want)
    if math.isnan(want):
        return False
    return abs(have - want) <= DRIFT_TOLERANCE * max(1.0, abs(want))
