"""`torch.compile` and the capture: compiled code runs its eager original while a capture is on.

The capture (`_capture`) is a TorchFunctionMode. Dynamo traces an active
TorchFunctionMode into the graph it compiles: the capture's own Python (its
`file:line` lookups) breaks the graph at every op, and the mode stack is part
of the guards, so the first call after the capture goes off recompiles. And
a compiled graph runs aten kernels the capture never sees. So while any
recorder's capture is on (the steps that analyse), the compiler's stance is
"force_eager" (`torch.compiler.set_stance`): every compiled module and
function runs its original Python, which the capture observes op by op, and
Dynamo neither traces nor guards anything of the recorder's. Between those
steps the stance is the user's again and the compiled code runs as compiled.
An analysing step therefore computes eagerly: bitwise the compiled step
wherever the compiled kernels round as eager ones do (tested on a small DQN
on CPU inductor), within rounding elsewhere.

torch < 2.6 has no `set_stance`: there the capture is on over compiled code
as over any other (graph breaks, a recompile after the analysing step).
"""

from __future__ import annotations

from typing import Any

import torch

# Recorders whose capture is on now, and the stance to restore when none is.
_CAPTURING = [0]
_FORCED: list[Any] = []


def eager_begin() -> None:
    """A capture goes on: compiled code runs eagerly until every capture is off."""
    _CAPTURING[0] += 1
    set_stance = getattr(torch.compiler, "set_stance", None)
    if _CAPTURING[0] == 1 and set_stance is not None:
        _FORCED.append(set_stance("force_eager"))  # sets it now; __exit__ restores


def eager_end() -> None:
    """A capture goes off: with none left, the stance before the first is back."""
    if _CAPTURING[0] == 0:
        return
    _CAPTURING[0] -= 1
    if _CAPTURING[0] == 0 and _FORCED:
        _FORCED.pop().__exit__(None, None, None)
