"""One training step made of several tapes, optimizers or tf.functions.

`Recorder.training_step()` opens a block: every `apply` inside it leaves the
step counter alone and the block's exit advances it once, so the losses of a
DDPG/SAC/GAN step (two tapes, two optimizers) are recorded at the same steps.
||delta theta|| is measured over the whole block for every recorded variable,
whichever optimizer moved it (also one the recorder never sees):

- a block inside a traced function takes the values before the step from the
  first loss recording branch of the block (which copies every recorded
  variable at recorded steps), provided nothing wrote them since the block
  opened; the table is computed at the block's exit;
- a block entered eagerly (around eager code or around several tf.functions)
  copies the recorded variables at its entry, at recorded steps and at steps
  where a loss is overdue (computed on other steps only), and writes the
  table at its exit (at such a late step, only when a loss was recorded in it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from tb_gradscope.record._context import ExecutionContext


@dataclasses.dataclass
class Block:
    """An open `training_step()` block.

    Attributes:
      graph: the graph the block was opened in (None when opened eagerly).
      first_op: how many ops that graph held when the block opened.
      before: values of every recorded variable before the step (layout order),
        once known; None when they could not be taken.
      analyzed: whether a function traced inside an eager block was analyzed
        (its FlowGraph is then written at the block's exit).
      due: an eager block's losses' due steps at its entry (`RecorderState.due_steps`):
        one that moved by its exit was recorded in it, late or not.
    """

    graph: Any = None
    first_op: int = 0
    before: list | None = None
    analyzed: bool = False
    due: list | None = None

    @classmethod
    def open(cls, ctx: ExecutionContext) -> Block:
        if ctx.eager:
            return cls()
        graph = tf.compat.v1.get_default_graph()
        return cls(graph=graph, first_op=len(graph.get_operations()))

    @property
    def eager(self) -> bool:
        return self.graph is None

    def holds_current_graph(self, ctx: ExecutionContext) -> bool:
        """Whether code running now belongs to the block's own graph (not to a
        function traced from inside an eager block)."""
        if self.eager:
            return ctx.eager
        return tf.compat.v1.get_default_graph() is self.graph

    def inside(self) -> bool:
        """Whether code running now is inside the block: its graph, a control-flow
        branch of it, or a function traced while an eager block is open."""
        if self.eager:
            return True
        graph = tf.compat.v1.get_default_graph()
        while graph is not None:
            if graph is self.graph:
                return True
            graph = getattr(graph, "outer_graph", None)
        return False
