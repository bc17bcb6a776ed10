"""The work behind a PyTorch Recorder's calls: what a step records, analyses and writes.

A step begins at `rec.backward` (or at a `rec.step()` block's entry) and ends
when the next begins or at `close()`: then its parameters hold the whole
step's result (optimizer steps, Polyak and hard copies). At a recorded step:

- at its beginning, a flat copy of the parameters and both sides of every
  pair (for ||delta theta|| and drift);
- at each backward, each loss's gradient per scope (`_losses`, `_stats`),
  kept on the device, and the conflict cosines' dot products;
- at its end, UPDATE_STATS and DRIFT, then every table of the step moves to
  the host in one transfer and is written, and the rules are checked.

A step analyses when its set of losses was never analysed, or reaches other
parameters than at that set's last analysis (step 0 always): alternating
losses (a GAN's) each get theirs. The capture (`_capture`) is on at step 0
and, while a loss set waits for an analysis with it, from the end of each
step; a step analysed without it reuses its losses' last captured forward.
The FlowGraph, written at the step's end, holds every loss analysed so far.
Which optimizer step applies which loss's gradient is followed through
`.grad` (`_ledger`). A step with nothing due costs a counter.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tb_gradscope import format as fmt
from tb_gradscope.core.drift import drift_table
from tb_gradscope.core.rules import STEP_EVENTS, TRACE_EVENTS, HostRuleSteps
from tb_gradscope.core.tables import TableInfos
from tb_gradscope.core.writer import RecordWriter
from tb_gradscope.torch import _compile as compile_lib
from tb_gradscope.torch import _distributed as distributed
from tb_gradscope.torch import _reach as reach_lib
from tb_gradscope.torch import _stats as stats
from tb_gradscope.torch import _torch_private as private
from tb_gradscope.torch._capture import Capture
from tb_gradscope.torch._drift import PairDrift
from tb_gradscope.torch._flow import LossFacts, flowgraph
from tb_gradscope.torch._ledger import GradLedger
from tb_gradscope.torch._loss_scale import LossScale, overflowed, unscaled
from tb_gradscope.torch._losses import StartPoint, per_loss_gradients, tensor_of
from tb_gradscope.torch._names import NamedParameters


@dataclasses.dataclass
class _StepWork:
    """What a recorded or analysed step keeps until it ends."""

    step: int
    recorded: bool
    captured: bool
    ledger: GradLedger
    analysed: bool = False
    # The parameters at the step's start (the recorder's snapshot buffers).
    before: list[torch.Tensor] | None = None
    grads: list[_GradGroup] = dataclasses.field(default_factory=list)
    facts: dict[str, LossFacts] = dataclasses.field(default_factory=dict)
    applied: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    last_reach: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    edges: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    open_edges: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    capture_error: Exception | None = None
    optimizer_stepped: bool = False
    reach: dict[str, frozenset[int]] = dataclasses.field(default_factory=dict)
    # A single loss's gradients, seen by hooks during the user's own backward.
    hooked: _Hooked | None = None


@dataclasses.dataclass
class _GradGroup:
    """One backward's losses and their per-parameter figures, still on the device."""

    names: list[str]
    columns: stats.GradColumns
    reached: np.ndarray  # [L, n_vars] bool: loss l's graph reaches parameter v
    # With a GradScaler: the scale at the backward (the table is unscaled by it).
    scale: torch.Tensor | None
    # With conflict and several losses: [L, L, n_present] dot products, per present parameter.
    gram: torch.Tensor | None
    reach_sets: list[set[int]]


@dataclasses.dataclass
class _Hooked:
    names: list[str]
    reach: dict[str, set[int]]
    handles: list[Any]
    grads: dict[int, torch.Tensor]
    # Under torch.distributed: `.grad` before the backward; the gradient is read after it.
    before: dict[int, torch.Tensor | None] | None = None


class TorchRecording:
    """The recorder's state and work; `Recorder` holds one and checks arguments."""

    def __init__(
        self,
        writer: RecordWriter,
        names: NamedParameters,
        optimizers: Sequence[torch.optim.Optimizer],
        drifts: Sequence[PairDrift],
        rules: HostRuleSteps,
        infos: TableInfos,
        every_n_steps: int,
        conflict: bool,
        loss_scale: LossScale | None = None,
    ):
        self.writer = writer
        self.loss_scale = loss_scale
        self.names = names
        self.params = names.params
        self.index = names.index
        self.optimizers = list(optimizers)
        self.drifts = list(drifts)
        self.rules = rules
        self.infos = infos
        self.every = every_n_steps
        self.conflict = conflict
        self.sizes = [p.numel() for p in self.params]
        self.rollup = stats.HostRollUp(names.layout)
        # The parameters' snapshot at a recorded step's start, made at the first.
        self._before: list[torch.Tensor] | None = None
        # Per optimizer, the indices of the parameters it steps (a parameter
        # may be in several).
        self.members = [self._members(opt) for opt in self.optimizers]
        self.step = 0
        self.open = False
        self.in_block = False
        self.work: _StepWork | None = None
        # loss set -> its reach at its last analysis; loss set -> the last step
        # it may wait for an analysis with the capture on.
        self.analysed: dict[frozenset[str], frozenset] = {}
        self.pending: dict[frozenset[str], int] = {}
        # The latest analysis of every loss, and the scope graph's edges: the
        # FlowGraph holds every loss analysed so far.
        self.loss_facts: dict[str, LossFacts] = {}
        self.graph_edges: dict[tuple[str, str], int] = {}
        self.graph_open_edges: dict[tuple[str, str], int] = {}
        self.capture: Capture | None = None
        # In a process group, a single loss's gradient is read from `.grad` after its backward.
        self.distributed = distributed.initialized()

    # ----- step boundaries -------------------------------------------------

    def begin_step(self) -> None:
        """Ends the step in progress, if any, and begins the next."""
        if self.work is None and self.capture is None and (self.step + self.open) % self.every:
            # Nothing due in the step ending nor in the next: the counter only.
            self.step += self.open
            self.open = True
            return
        with Capture.paused():
            self._begin_step()

    def _begin_step(self) -> None:
        if self.open:
            self._end_step()
            self.step += 1
        self.open = True
        recorded = self.step % self.every == 0
        captured = self.capture is not None
        if not (recorded or captured):
            self.work = None
            return
        self.work = _StepWork(self.step, recorded, captured, GradLedger(self.params))
        if recorded:
            with torch.no_grad():
                if self._before is None:
                    self._before = [torch.empty_like(p) for p in self.params]
                private.foreach_copy(self._before, self.params)
                for drift in self.drifts:
                    drift.snapshot()
            self.work.before = self._before

    def end_step(self) -> None:
        """Writes what the step in progress recorded and analysed."""
        with Capture.paused():
            self._end_step()

    def _end_step(self) -> None:
        work, self.work = self.work, None
        if work is None:
            return
        # Every figure of the step moves to the host in one transfer.
        device_side: list[torch.Tensor] = []
        for group in work.grads:
            for t in (group.columns.device_figures, group.scale, group.gram):
                device_side += [t] if t is not None else []
        squares, update_at, values_at, planned = None, [], [], []
        if work.recorded and work.before is not None:
            with torch.no_grad():
                squares = stats.SquareSums()
                update_at = squares.add(private.foreach_sub(self.params, work.before))
                values_at = squares.add(self.params)
                planned = [d.plan(squares, work.before, update_at, values_at) for d in self.drifts]
                device_side.append(squares.reduce())
        host = iter(stats.pack(device_side))
        grad_tables: dict[str, np.ndarray] = {}
        scales: dict[str, float] = {}
        grams = []
        for group in work.grads:
            figures = next(host) if group.columns.device_figures is not None else None
            table = group.columns.table(figures, group.reached, self.rollup)
            if group.scale is not None:
                scale = float(next(host))
                table = unscaled(table, scale)
                scales.update(dict.fromkeys(group.names, scale))
            grad_tables.update({n: table[k].astype(np.float32) for k, n in enumerate(group.names)})
            if group.gram is not None:
                grams.append((group.names, group.reach_sets, self._rolled_gram(group, next(host))))
        update_table, drift_sums = None, []
        if squares is not None:
            folded = squares.fold(next(host))
            per_var = np.stack([folded[update_at], folded[values_at]], axis=1)
            update_table = np.sqrt(self.rollup.sum(per_var)).astype(np.float32)
            drift_sums = [d.sums(plan, folded) for d, plan in zip(self.drifts, planned)]
        step = work.step
        if work.analysed and work.facts:
            self._write_flowgraph(step, work)
        if work.recorded:
            if scales and overflowed(grad_tables.values()):  # the GradScaler skips this step
                first = next(n for n in grad_tables if overflowed([grad_tables[n]]))
                self.writer.write_blobs(*self.loss_scale.skipped(step, scales[first]), step)
                grad_tables, grams = {}, []
            for name, table in grad_tables.items():
                self.writer.write_table(self.infos.grad_stats(name), table, step)
                self.rules.add_grads(step, name, table)
            for losses, reach_sets, gram in grams:
                self._write_conflict(step, losses, reach_sets, gram)
            if update_table is not None:
                self.writer.write_table(self.infos.update_stats(), update_table, step)
            for drift, (sums, had) in zip(self.drifts, drift_sums):
                table = drift_table(sums, True, drift.optimizer_vars, had)
                self.writer.write_table(drift.info, table, step)
            events = self.rules.at_step(step, update_table)
            self.writer.flush()
            written = self.rules.write(self.writer.write_blobs, events, STEP_EVENTS)
            if written:
                self.writer.flush()
            self.rules.apply_policy(written)
        self.writer.flush()

    # ----- the capture ----------------------------------------------------

    def start_capture(self) -> None:
        """Turns the capture on for the step that begins next (it analyses)."""
        if self.capture is None:
            self.capture = Capture(self.index, self.names.layout.variable_leaf)
            compile_lib.eager_begin()  # compiled code runs its eager original meanwhile
            self.capture.__enter__()

    def stop_capture(self) -> None:
        """Turns the capture off; an analysed step keeps its scope-graph edges."""
        capture, self.capture = self.capture, None
        if capture is None:
            return
        private.leave_function_mode(capture)
        compile_lib.eager_end()
        self._take_edges(capture)
        capture.clear()

    def next_watched_step(self) -> None:
        """Watch mode's step boundary, met at the next step's first backward,
        after that step's forward: ends the step in progress, begins the next.
        While a loss set waits for an analysis with the capture, the capture
        goes on across the boundary (it saw this forward); a capture turned on
        only now missed it, so the step it begins does not count as captured."""
        self.in_block = False
        capture = self.capture
        if capture is not None:
            self._take_edges(capture)
            capture.edges.clear()
            capture.open_edges.clear()
        self.backwards_done()  # keeps a capture that is on while a set waits
        if capture is not None and not self.pending:
            self.stop_capture()
        late = capture is None and self.capture is not None
        self.begin_step()
        if late and self.work is not None:
            self.work.captured = False
        self.in_block = True

    def _take_edges(self, capture: Capture) -> None:
        work = self.work
        if work is not None:
            for edge, count in capture.edges.items():
                work.edges[edge] = work.edges.get(edge, 0) + count
            for edge, count in capture.open_edges.items():
                work.open_edges[edge] = work.open_edges.get(edge, 0) + count
            work.capture_error = work.capture_error or capture.error

    def after_backward(self) -> None:
        """After the user's backward: its losses are in `.grad`, the hooked
        gradients become tables; outside a block, the step's backwards are done."""
        work = self.work
        if work is not None and work.last_reach:
            work.ledger.after_backward(work.last_reach)
            work.last_reach = {}
        if work is not None and work.hooked is not None:
            hooked, work.hooked = work.hooked, None
            drop_hooks(hooked)
            if hooked.before is not None:
                hooked.grads.update(distributed.grads_after(self.params, hooked.before))
            grads: list[torch.Tensor | None] = [None] * len(self.params)
            for i, g in hooked.grads.items():
                grads[i] = g.unsqueeze(0)
            with Capture.paused(), torch.no_grad():
                self._tables(work, hooked.names, grads, hooked.reach)
        if not self.in_block:
            self.backwards_done()

    def drop_hooks(self) -> None:
        """Removes the gradient hooks of a backward that raised."""
        work = self.work
        if work is not None and work.hooked is not None:
            drop_hooks(work.hooked)
            work.hooked = None

    def backwards_done(self) -> None:
        """The step's last backward ran (a backward outside a block, a block's
        exit). The step analyses when its loss set was never analysed, reaches
        other parameters than then, or waits for the capture and had it. An
        analysis without the capture reuses each loss's last captured forward;
        a loss without one leaves its set waiting, and while any set waits
        the capture goes on now (the next forward runs before its backward)."""
        work = self.work
        if work is not None and work.reach:
            key = frozenset(work.reach)
            if self._changed(work) or (key in self.pending and work.captured):
                work.analysed = True
                self.analysed[key] = frozenset(work.reach.items())
                complete = True
                for name, facts in work.facts.items():
                    last = self.loss_facts.get(name)
                    if facts.captured is None:
                        facts.captured = last.captured if last is not None else None
                        if last is not None:
                            facts.open_origins, facts.path_cuts = last.open_origins, last.path_cuts
                        complete = complete and last is not None and last.reach == facts.reach
                if work.captured or (complete and all(f.captured for f in work.facts.values())):
                    self.pending.pop(key, None)
                else:
                    self.pending[key] = self.step + max(4, 2 * self.every)
        if self.pending:  # a step with nothing due pays this test only
            self.pending = {k: last for k, last in self.pending.items() if last > self.step}
            if self.pending:
                self.start_capture()

    # ----- a backward -----------------------------------------------------

    def before_backward(self, losses: Mapping[str, Any], hooks_allowed: bool = True) -> None:
        """At a recorded or analysed step: each loss's reach, gradients and facts.

        A single loss's gradient is the user's backward's own: hooks on the
        parameters it reaches see it go by (no second backward); several
        losses' come from one batched `autograd.grad` before it."""
        capture = self.capture
        work = self.work
        if work is None:
            return
        with Capture.paused(), torch.no_grad():
            reach = {}
            custom = {}
            for name, loss in losses.items():
                reach[name], custom[name] = reach_lib.reached(tensor_of(loss), self.index)
            work.reach.update({n: frozenset(r) for n, r in reach.items()})
            work.last_reach = reach
            work.ledger.before_backward(set().union(*reach.values()))
            # Under DDP: no backward of the recorder's own that would start a collective.
            own_backward = not distributed.reduces_in_backward(
                [tensor_of(loss) for loss in losses.values()], custom
            )
            custom = distributed.without_sink(custom)
            if work.recorded and hooks_allowed and len(losses) == 1:
                self._hook_gradients(work, reach)
            elif work.recorded and own_backward:
                self._record_gradients(work, losses, reach)
            if self.in_block or work.captured or self._changed(work):
                for name, loss in losses.items():
                    work.facts[name] = self._facts(name, loss, reach, custom, capture, own_backward)
        if not self.in_block:
            self.stop_capture()

    def record_given(
        self, grads: Mapping[str, Sequence[torch.Tensor | None]], reach: Mapping[str, set[int]]
    ) -> None:
        """A step's gradients computed by the user ({loss: per-parameter grads})."""
        work = self.work
        if work is None:
            return
        if work.recorded:
            names = list(grads)
            stacked = []
            for v, p in enumerate(self.params):
                column = [grads[n][v] for n in names]
                stacked.append(
                    None
                    if all(g is None for g in column)
                    else torch.stack([torch.zeros_like(p) if g is None else g for g in column])
                )
            self._tables(work, names, stacked, reach)
        work.reach.update({n: frozenset(r) for n, r in reach.items()})
        work.ledger.given(reach)
        # No loss tensor: the forward is what the step's torch.autograd.grad calls differentiated.
        for name in grads:
            captured = self.capture.given_deps(grads[name]) if self.capture is not None else None
            work.facts[name] = LossFacts("loss", set(reach[name]), set(), [], None, "", captured)
        if self.capture is not None:
            self.capture.forget_given()

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Which losses' gradients an optimizer step consumes: those its
        parameters' `.grad` still holds (at a recorded or captured step)."""
        work = self.work
        if work is None:
            return
        k = next((i for i, opt in enumerate(self.optimizers) if opt is optimizer), None)
        if k is None or not (self.in_block or work.analysed):
            return  # what a step applies is read by its analysis only
        work.optimizer_stepped = True
        with Capture.paused():
            consumed = work.ledger.consumed(self.members[k])
        for loss, indices in consumed.items():
            work.applied.setdefault(loss, set()).update(indices)
            facts = work.facts.get(loss)
            if facts is not None:
                facts.optimizer = facts.optimizer or f"opt{k}"

    def add_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        """Watch mode adopts an optimizer (as if given) when it steps a recorded parameter."""
        members = self._members(optimizer)
        if members:
            self.optimizers.append(optimizer)
            self.members.append(members)
        return bool(members)

    # ----- internals --------------------------------------------------------

    def _members(self, optimizer: torch.optim.Optimizer) -> set[int]:
        return {
            self.index[id(p)]
            for g in optimizer.param_groups
            for p in g["params"]
            if id(p) in self.index
        }

    def _changed(self, work: _StepWork) -> bool:
        """Whether the step's losses were never analysed together, or reach other
        parameters than at their last analysis."""
        return self.analysed.get(frozenset(work.reach)) != frozenset(work.reach.items())

    def _hook_gradients(self, work: _StepWork, reach: Mapping[str, set[int]]) -> None:
        """Hooks on the parameters a single loss reaches: each sees its gradient
        as the user's backward accumulates it (returning None, they change nothing).
        In a process group, `.grad` is read after the backward instead (`_distributed`)."""
        got: dict[int, torch.Tensor] = {}

        def keep(i: int) -> Callable[[torch.Tensor], None]:
            def hook(grad: torch.Tensor | None) -> None:
                if grad is not None:  # None: a custom Function's backward gave none
                    got[i] = grad

            return hook

        (name,) = reach
        if self.distributed:  # DDP reduces `.grad` after the hooks see it: read it after
            before = distributed.grads_before(self.params, sorted(reach[name]))
            work.hooked = _Hooked([name], {n: set(r) for n, r in reach.items()}, [], {}, before)
            return
        handles = [
            self.params[i].register_hook(keep(i))
            for i in sorted(reach[name])
            if self.params[i].requires_grad
        ]
        work.hooked = _Hooked([name], {n: set(r) for n, r in reach.items()}, handles, got)

    def _record_gradients(self, work: _StepWork, losses: Mapping[str, Any], reach) -> None:
        union = sorted(set().union(*reach.values()))
        inputs = [self.params[i] for i in union if self.params[i].requires_grad]
        positions = [i for i in union if self.params[i].requires_grad]
        with torch.enable_grad():
            per_input = per_loss_gradients(losses, inputs)
        grads: list[torch.Tensor | None] = [None] * len(self.params)
        for i, g in zip(positions, per_input):
            grads[i] = g
        self._tables(work, list(losses), grads, reach)

    def _tables(self, work: _StepWork, names: list[str], grads, reach) -> None:
        """One backward's gradients ([L, *shape] per parameter, or None) -> its
        per-parameter figures, kept on the device until the step ends."""
        reached = np.zeros((len(names), len(self.params)), bool)
        for k, n in enumerate(names):
            reached[k, [i for i in reach[n] if grads[i] is not None]] = True
        columns = stats.GradColumns(grads, len(names))
        device = self.params[0].device
        scale = self.loss_scale.current(device) if self.loss_scale is not None else None
        gram = None
        if self.conflict and len(names) > 1 and columns.present:
            flat_grads, present = stats.flat_gradients(grads, len(names))
            gram = stats.gram(flat_grads, [self.sizes[v] for v in present])
        reach_sets = [set(reach[n]) for n in names]
        work.grads.append(_GradGroup(names, columns, reached, scale, gram, reach_sets))

    def _rolled_gram(self, group: _GradGroup, gram: np.ndarray) -> np.ndarray:
        """[L, L, n_present] dot products (host) -> [L, L, n_scopes]."""
        n = len(group.names)
        full = np.zeros((n, n, len(self.params)))
        full[:, :, group.columns.present] = gram
        return self.rollup.sum(full.reshape(-1, len(self.params), 1)).reshape(n, n, -1)

    def _write_conflict(self, step, losses, reach_sets, gram) -> None:
        members = self.names.layout.members
        scopes = self.names.layout.scopes
        for a, b in itertools.combinations(range(len(losses)), 2):
            rows = [
                s
                for s, m in enumerate(members)
                if reach_sets[a] & set(m) and reach_sets[b] & set(m)
            ]
            if not rows:
                continue
            num = gram[a, b, rows]
            den = np.sqrt(gram[a, a, rows] * gram[b, b, rows])
            with np.errstate(divide="ignore", invalid="ignore"):
                cos = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
            info = self.infos.conflict(losses[a], losses[b], [scopes[s] for s in rows])
            self.writer.write_table(info, cos.reshape(-1, 1).astype(np.float32), step)

    def _facts(self, name, loss, reach, custom, capture, own_backward=True) -> LossFacts:
        root = tensor_of(loss)
        grad = loss.grad if isinstance(loss, StartPoint) else None
        reached = sorted(i for i in reach[name] if self.params[i].requires_grad)
        with torch.enable_grad():
            none = (
                reach_lib.none_gradients(root, grad, self.params, reached)
                if custom[name] and own_backward
                else set()
            )
        captured = capture.deps_of(root) if capture is not None else None
        open_origins, path_cuts = (
            capture.paths_of(root) if capture is not None else (frozenset(), frozenset())
        )
        return LossFacts(
            kind="start_point" if grad is not None else "loss",
            reach=set(reach[name]),
            none_grads=none,
            custom=custom[name],
            applied=None,
            captured=captured,
            custom_sources=dict(capture.custom_sources) if capture is not None else {},
            open_origins=open_origins,
            path_cuts=path_cuts,
        )

    def _write_flowgraph(self, step: int, work: _StepWork) -> None:
        applied_all = set().union(*self.members) if self.optimizers else None
        for name, facts in work.facts.items():
            if self.optimizers:
                # With no optimizer step seen in the step, which consumes what
                # is not known: any may.
                facts.applied = (
                    work.applied.get(name, set()) if work.optimizer_stepped else applied_all
                )
        self.loss_facts.update(work.facts)
        self.graph_edges.update(work.edges)
        self.graph_open_edges.update(work.open_edges)
        graph = flowgraph(
            self.names,
            self.loss_facts,
            self.graph_edges,
            work.capture_error,
            applied_all,
            [p.requires_grad for p in self.params],
            self.graph_open_edges,
        )
        info = fmt.make_info(fmt.Kind.FLOWGRAPH, attrs=self.rules.flowgraph_attrs)
        self.writer.write_blobs(info, [graph.to_json()], step)
        # A loss the FlowGraph lacks may come at a later step (a GAN's losses
        # alternate): `tb-gradscope check` reports rule losses no step matched.
        events = [
            e for e in self.rules.at_analysis(graph, step) if e.evidence.get("unmatched") != "loss"
        ]
        if events:
            self.rules.write(self.writer.write_blobs, {step: events}, TRACE_EVENTS)
        self.writer.flush()
        self.rules.apply_policy(events)


def drop_hooks(hooked: _Hooked) -> None:
    for handle in hooked.handles:
        handle.remove()
