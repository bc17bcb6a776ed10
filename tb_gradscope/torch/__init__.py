"""Record a plain PyTorch training loop: which scopes each loss updates.

    from tb_gradscope.torch import Recorder, pair_models
    rec = Recorder("logs/dqn", models={"online": q, "target": q_target}, optimizers=[opt],
                   pairs=[pair_models(q_target, q, every=500)], rules=["never(td, target/*)"])
    ...
    rec.backward({"td": loss})      # in place of loss.backward()

This module's names are the package's public API; the modules beside it are
its private parts, underscored: `_recorder` (`Recorder`), `_recording` (the
work behind each call), `_losses` (`StartPoint`, the user's backward and each
loss's gradient), `_names` (parameters -> scopes), `_capture` (forward
dependence at a step that analyses; `_grad_mode_source`, the `with
torch.no_grad():` line of a cut), `_reach` (the autograd graph), `_flow`
(the FlowGraph), `_stats` and `_drift` (the device kernels), `_loss_scale`
(a GradScaler's scale and skipped steps), `_compile` (compiled code runs
eagerly while the capture is on), `_pairs` (`pair_models`, "auto"),
`_distributed` (DDP: rank 0 writes, reduced gradients) and `_torch_private`
(every private torch symbol).
Watch mode (`rec.watch()`) is `_watch`'s, its loss names `_call_site`'s.
What it shares with the TF recorders is `tb_gradscope.core`'s. Imports torch,
never tensorflow.

Public submodules, each imported on its own and bringing its framework:
`lightning` and `pytorch_lightning` (`GradscopeCallback` for either Lightning
package; the work is `_lightning`'s), and `sb3` (Stable-Baselines3's
`GradscopeCallback`; an algorithm's models, optimizers and pairs are
`_sb3_structure`'s).
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - tested in a subprocess without torch
    raise ImportError(
        "tb_gradscope.torch needs PyTorch: install torch (pip install 'tb-gradscope[torch]')"
    ) from e

from tb_gradscope.core.warn import GradscopeWarning
from tb_gradscope.torch import _torch_private
from tb_gradscope.torch._losses import StartPoint
from tb_gradscope.torch._pairs import pair_models
from tb_gradscope.torch._recorder import Recorder

# Imported before tensorflow, torch's compiler stack keeps a later tensorflow
# import from crashing torch (docs/TORCH.md, *Both frameworks in one process*).
_torch_private.load_compiler()

__all__ = ["GradscopeWarning", "Recorder", "StartPoint", "pair_models"]
