"""A fix in the words of the framework that traced the run.

`FlowGraph.source` says which: "tf2" and "keras" (a GradientTape, an
optimizer's var_list), "tf1" (Session code: assign ops, `minimize(var_list=)`),
"torch" (PyTorch: `.detach()`, `torch.no_grad()`, the optimizer's parameter list,
`requires_grad_`). The findings, the anomaly fixes and the blocked-edge fixes
take their framework phrases from here, so a PyTorch user is never told to add
a `tf.stop_gradient`. Never imports a framework.
"""

from __future__ import annotations

import dataclasses

# `FlowGraph.source` of a run traced from TF1 graph code (`GraphRecorder`) and
# of one recorded by `tb_gradscope.torch`.
TF1_SOURCE = "tf1"
TORCH_SOURCE = "torch"


@dataclasses.dataclass(frozen=True)
class Idiom:
    """How a framework says the things a fix asks for.

    Attributes:
      cut_under: how a value is computed out of the gradient ("under tf.stop_gradient").
      cut_with: what cuts a path where a head reads a scope ("with tf.stop_gradient").
      outside: the other way to keep it out, in parentheses' words.
      scoped: what limits an optimizer to some variables ("var_list").
      untrainable: how to make a network no optimizer can train.
      untargeted: what trains every trainable variable a gradient reaches.
      cut_value: how to cut a value a loss reads ("{value}" is filled in).
      cut_example: a value cut where a head reads it (an advantage).
    """

    cut_under: str
    cut_with: str
    outside: str
    scoped: str
    untrainable: str
    untargeted: str
    cut_value: str
    cut_example: str


TF2 = Idiom(
    cut_under="under tf.stop_gradient",
    cut_with="with tf.stop_gradient",
    outside="or before the tape opens",
    scoped="var_list",
    untrainable="create it with trainable=False",
    untargeted="any tape.gradient over trainable_variables or any optimizer without var_list",
    cut_value="wrap {value} in tf.stop_gradient",
    cut_example="advantage = tf.stop_gradient(returns - value)",
)
TF1 = dataclasses.replace(
    TF2,
    outside="or evaluate it in a sess.run of its own and feed the values in",
    untargeted="any minimize or compute_gradients without var_list (they take every trainable variable)",
)
TORCH = Idiom(
    cut_under="with .detach()",
    cut_with="with .detach()",
    outside="or under torch.no_grad()",
    scoped="parameter list",
    untrainable="freeze its parameters with requires_grad_(False)",
    untargeted="any optimizer whose param groups hold them (optim.Adam(model.parameters()) holds "
    "every parameter) stepped after the loss's backward",
    cut_value="call .detach() on {value}",
    cut_example="advantage = (returns - value).detach()",
)


def idiom(source: str) -> Idiom:
    """The phrases of the framework that traced a run (TF2's when it is not known)."""
    return {TF1_SOURCE: TF1, TORCH_SOURCE: TORCH}.get(source, TF2)
