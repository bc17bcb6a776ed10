"""A backward's call site names its loss: the variable at the source line that
started it (through Tensor.backward, torch.autograd.backward, a GradScaler, a
Lightning-style manual_backward), else `file:line`; frames inside torch,
Lightning and tb_gradscope are not call sites, Stable-Baselines3's are."""

from __future__ import annotations

import sys

import pytest
import torch

from tb_gradscope.torch import _call_site
from tb_gradscope.torch._call_site import loss_name, loss_names, user_frame


@pytest.fixture
def seen(monkeypatch):
    """Every torch.autograd.backward call's name, as watch mode finds it."""
    names: list[str] = []
    original = torch.autograd.backward

    def spy(tensors, *args, **kwargs):
        frame = user_frame(sys._getframe(1))  # the spy itself is no call site
        count = len(tensors) if isinstance(tensors, (list, tuple)) else 1
        names.append(loss_names(frame, count) if count > 1 else loss_name(frame))
        return original(tensors, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "backward", spy)
    return names


def _loss():
    w = torch.ones(3, requires_grad=True)
    return (w * 2).sum()


class _Holder:
    pass


def test_a_variable_names_its_backward(seen):
    critic_loss = _loss()
    critic_loss.backward()
    assert seen == ["critic_loss"]


def test_an_attribute_names_its_backward_by_its_last_part(seen):
    self = _Holder()
    self.loss = _loss()
    self.loss.backward()
    assert seen == ["loss"]


def test_a_gradscaler_call_names_the_loss_it_scales(seen):
    scaler = torch.amp.GradScaler("cpu")
    loss = _loss()
    scaler.scale(loss).backward()
    assert seen == ["loss"]


def test_a_reduction_and_a_string_key_name_the_loss(seen):
    td = (torch.ones(3, requires_grad=True) * 2).sum()
    td.mean().backward()
    losses = {"critic": _loss()}
    losses["critic"].backward()
    assert seen == ["td", "critic"]


def test_torch_autograd_backward_names_its_first_argument(seen):
    actor_loss = _loss()
    torch.autograd.backward(actor_loss, retain_graph=False)
    assert seen == ["actor_loss"]


def test_a_list_of_losses_names_each(seen):
    a, b = _loss(), _loss()
    torch.autograd.backward([a, b])
    assert seen == [("a", "b")]


def test_a_call_split_over_lines_is_named(seen):
    q_loss, critic_loss = _loss(), _loss()
    # fmt: off
    (q_loss
        .backward(
            retain_graph=False))
    torch.autograd.backward(
        critic_loss,
        retain_graph=False,
    )
    # fmt: on
    assert seen == ["q_loss", "critic_loss"]


def test_two_backwards_on_one_line_are_told_apart(seen):
    a, b = _loss(), _loss()
    a.backward(), b.backward()  # noqa: B018
    assert seen == ["a", "b"]


def test_an_unnamed_loss_is_named_by_file_and_line(seen):
    w = torch.ones(3, requires_grad=True)
    line = sys._getframe().f_lineno + 1
    (w * 2).sum().backward()
    assert seen == [f"test_torch_watch_call_site.py:{line}"]
    assert "/" not in seen[0] and "|" not in seen[0]


def test_code_without_source_is_named_by_file_and_line(seen):
    exec(compile("loss = w.sum()\n\nloss.backward()\n", "<generated>", "exec"), {"w": _w()})
    assert seen == ["<generated>:3"]


def _w():
    return torch.ones(2, requires_grad=True)


def _framework_module(name: str, source: str) -> dict:
    """Runs `source` as if it were module `name` (a framework's own file)."""
    namespace = {"__name__": name, "torch": torch}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace


def test_a_lightning_manual_backward_names_its_argument(seen):
    lightning = _framework_module(
        "lightning.pytorch.core.module",
        "def manual_backward(loss):\n    loss.backward()\n",
    )
    self = _Holder()
    self.manual_backward = lightning["manual_backward"]
    g_loss = _loss()
    self.manual_backward(g_loss)
    assert seen == ["g_loss"]


def test_tb_gradscope_and_torch_frames_are_skipped_sb3_frames_are_not():
    inner = _framework_module(
        "tb_gradscope.torch.fake", "import sys\ndef here():\n    return sys._getframe()\n"
    )
    assert user_frame(inner["here"]()) is sys._getframe()
    sb3 = _framework_module(
        "stable_baselines3.sac.fake", "import sys\ndef here():\n    return sys._getframe()\n"
    )
    frame = user_frame(sb3["here"]())
    assert frame.f_globals["__name__"] == "stable_baselines3.sac.fake"
    assert "stable_baselines3" not in _call_site.SKIPPED_PACKAGES


def test_an_sb3_file_is_its_own_call_site(seen):
    sac_module = pytest.importorskip("stable_baselines3.sac.sac")  # a venv of torch alone has none

    lines = open(sac_module.__file__).read().splitlines()
    line = next(i for i, s in enumerate(lines, 1) if s.strip() == "critic_loss.backward()")
    # Code compiled as that file, that line and its indentation: the name comes from SB3's source.
    source = "\n" * (line - 2) + "if True:\n" + lines[line - 1] + "\n"
    namespace = {"__name__": "stable_baselines3.sac.sac", "critic_loss": _loss()}
    exec(compile(source, sac_module.__file__, "exec"), namespace)
    assert seen == ["critic_loss"]


def test_a_call_site_is_parsed_once(seen, monkeypatch):
    calls = []
    parse = _call_site.ast.parse
    monkeypatch.setattr(_call_site.ast, "parse", lambda *a: calls.append(1) or parse(*a))
    monkeypatch.setattr(_call_site, "_names", {})
    monkeypatch.setattr(_call_site, "_files", {})
    for _ in range(3):
        loss = _loss()
        loss.backward()
    assert seen == ["loss"] * 3
    assert len(calls) == 1


def test_without_column_positions_a_call_is_found_by_its_line(seen, monkeypatch):
    """Python 3.10 has no `co_positions`: the one backward call on the line names
    the loss; two on one line cannot be told apart and fall back to file:line."""
    monkeypatch.setattr(_call_site, "_position", lambda code, lasti: None)
    monkeypatch.setattr(_call_site, "_names", {})
    critic_loss, a, b = _loss(), _loss(), _loss()
    # fmt: off
    torch.autograd.backward(
        critic_loss,
    )
    line = sys._getframe().f_lineno + 1
    a.backward(), b.backward()  # noqa: B018
    # fmt: on
    here = f"test_torch_watch_call_site.py:{line}"
    assert seen == ["critic_loss", here, here]
