"""Evidence as sentences, one wording for `report`, `check`, `doctor` and the tab.

    blocked_line(edge)        # "td: target/l1 -> loss:td  StopGradient 'sg' (stop_gradient) at train.py:42 in step"
    blocked_fix(edge)         # what to do about the cut, in the user's terms
    evidence_sentences(doc)   # ["gradient cosine median 0.9977 (min -0.9963) over 40 steps", ...]

The phrases are ASCII, so they print on any terminal encoding.

Names from logs pass through `safe` (control characters escaped) here, so a
caller prints the strings as they are; the tab shows them as text, never HTML.
Never imports tensorflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format import flowgraph as fg
from tb_gradscope.read.idiom import TORCH_SOURCE

_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}

# What to do about a cut, per cause; {loss}, {scope}, {op} and {where} are filled in.
_FIXES = {
    fg.CAUSE_STOP_GRADIENT: (
        "if {loss} must not train {scope} (a target network), this cut is right: pin it with "
        "blocked({loss}, {scope}); if it should, remove the tf.stop_gradient{where}"
    ),
    fg.CAUSE_NON_DIFFERENTIABLE: (
        "{op} has no gradient by design: compute {loss} from a differentiable op instead{where} "
        "(e.g. a softmax-weighted sum for argmax), or pin the cut with blocked({loss}, {scope})"
    ),
    fg.CAUSE_NO_GRADIENT: (
        "{op} has no gradient function: use tf.py_function (differentiable) rather than "
        "tf.numpy_function{where}, or register a gradient for it"
    ),
    fg.CAUSE_INTEGER: (
        "the path only crosses integer or bool tensors ({op}{where}): keep the values that {loss} "
        "needs in floating point, or pin the cut with blocked({loss}, {scope})"
    ),
    fg.CAUSE_CUSTOM_GRADIENT_NONE: (
        "the custom gradient of {op}{where} returns None for this input: return its gradient, "
        "or pin the cut with blocked({loss}, {scope})"
    ),
    fg.CAUSE_UNKNOWN: (
        "the analysis does not know {op}'s gradient{where}: check with tape.gradient (tf.gradients "
        "in TF1 graph code) whether {scope} gets one, and report the op type"
    ),
    fg.CAUSE_TAPE_BOUNDARY: (
        "{scope} is read before the GradientTape opens (or the tape does not watch it): compute "
        "{loss}'s use of it inside the tape if {loss} should train it; else pin blocked({loss}, {scope})"
    ),
}

# The same, in PyTorch's words (a run whose FlowGraph source is "torch").
_TORCH_FIXES = {
    **_FIXES,
    fg.CAUSE_STOP_GRADIENT: (
        "if {loss} must not train {scope} (a target network), this cut is right: pin it with "
        "blocked({loss}, {scope}); if it should, remove the .detach() (or the torch.no_grad() block){where}"
    ),
    fg.CAUSE_NON_DIFFERENTIABLE: (
        "{op} has no derivative by design: compute {loss} from a differentiable function instead{where} "
        "(e.g. a softmax-weighted sum for argmax, a tensor rather than an .item() value), or pin the cut "
        "with blocked({loss}, {scope})"
    ),
    fg.CAUSE_NO_GRADIENT: (
        "{op} has no backward{where}: write it with torch functions, or as an autograd.Function "
        "with a backward, or pin the cut with blocked({loss}, {scope})"
    ),
    fg.CAUSE_CUSTOM_GRADIENT_NONE: (
        "the backward of the autograd.Function {op}{where} returns None for this input: return its "
        "gradient, or pin the cut with blocked({loss}, {scope})"
    ),
    fg.CAUSE_UNKNOWN: (
        "the analysis does not know {op}'s gradient{where}: check with torch.autograd.grad(..., "
        "allow_unused=True) whether {scope} gets one, and report the function"
    ),
    fg.CAUSE_TAPE_BOUNDARY: (
        "{scope} is out of the autograd graph (its parameters have requires_grad=False, or {loss} read "
        "it before they were set to require gradients): call requires_grad_(True) on them if {loss} "
        "should train it; else pin blocked({loss}, {scope})"
    ),
}


def safe(text: Any) -> str:
    """`text` as a string with control characters escaped: names come from log
    files anyone can write, and an escape sequence printed raw could rewrite
    the user's terminal (C0/C1 controls, DEL and the bidi overrides)."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        elif code in _BIDI:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def number(value: Any) -> str:
    """A float in 4 significant digits; NaN/Inf spelled out; ints as ints; None as -."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.4g}"
    return safe(value)


def blocked_where(edge: Mapping[str, Any]) -> str:
    """ " at file:line in function" (or "" when the op has no user source line)."""
    if not edge.get("source"):
        return ""
    where = f" at {safe(edge['source'])}"
    if edge.get("function"):
        where += f" in {safe(edge['function'])}"
    return where


def blocked_line(edge: Mapping[str, Any]) -> str:
    """`report`'s line for a blocked edge (a `read.summary` blocked-edge dict):
    loss, both sides, the cutting op, the cause and the source line."""
    where = blocked_where(edge) or " (no user source line)"
    return (
        f"{safe(edge['loss'])}: {safe(edge['producer_scope'])} -> {safe(edge['consumer_scope'])}  "
        f"{safe(edge['op_type'])} '{safe(edge['op_name'])}' ({safe(edge['cause'])}){where}"
    )


def blocked_fix(edge: Mapping[str, Any], source: str = "") -> str:
    """What to do about the cut, worded for its cause in the words of the
    framework that traced the run (`FlowGraph.source`)."""
    fixes = _TORCH_FIXES if source == TORCH_SOURCE else _FIXES
    template = fixes.get(str(edge.get("cause")), fixes[fg.CAUSE_UNKNOWN])
    return template.format(
        loss=safe(edge["loss"]),
        scope=safe(edge["producer_scope"]),
        op=f"{safe(edge['op_type'])} '{safe(edge['op_name'])}'",
        where=blocked_where(edge),
    )


def blocked_edge_dict(edge: fmt.BlockedEdge) -> dict[str, Any]:
    """A FlowGraph blocked edge as `report` (and `blocked_line`) takes it."""
    return {
        "loss": edge.loss,
        "producer_scope": edge.producer_scope,
        "consumer_scope": edge.consumer_scope,
        "op_type": edge.op_type,
        "op_name": edge.op_name,
        "cause": edge.cause,
        "source": f"{edge.source.file}:{edge.source.line}" if edge.source else None,
        "function": edge.source.function if edge.source else None,
        "open_path": list(edge.open_path),
    }


def blocked_text(edge: fmt.BlockedEdge, source: str = "") -> dict[str, str]:
    """A blocked edge in `tb-gradscope report`'s words: its line and its fix
    (`source`: the FlowGraph's framework)."""
    doc = blocked_edge_dict(edge)
    return {"line": blocked_line(doc), "fix": blocked_fix(doc, source)}


def blocked_cuts(graph: fmt.FlowGraph) -> list[tuple[fmt.BlockedEdge, dict[str, str], set[str]]]:
    """Each blocked edge of `graph`, report's text for it, and the scopes whose
    cells it blocks: its producer scope and every scope-graph node the forward
    pass reaches it from, with all their ancestors (roll-ups). One backward walk
    per blocked edge (`read.runs.RunLogs.cuts` keeps them per FlowGraph)."""
    backward: dict[str, list[str]] = {}
    for edge in graph.edges:
        backward.setdefault(edge.dst, []).append(edge.src)
    cuts = []
    for blocked in graph.blocked_edges:
        reach = {blocked.producer_scope}
        frontier = [blocked.producer_scope]
        while frontier:
            for src in backward.get(frontier.pop(), []):
                if src not in reach:
                    reach.add(src)
                    frontier.append(src)
        scopes = {a for node in reach for a in scopes_lib.ancestors(node)}
        cuts.append((blocked, blocked_text(blocked, graph.source), scopes))
    return cuts


def _path(value: Any) -> str:
    return " -> ".join(safe(v) for v in value) if isinstance(value, (list, tuple)) else safe(value)


def _names(value: Any) -> str:
    return ", ".join(safe(v) for v in value) if isinstance(value, (list, tuple)) else safe(value)


def _count(value: Any, one: str, many: str | None = None) -> str:
    shown = number(value)
    return f"{shown} {one if value == 1 else (many or one + 's')}"


def _cause(doc: Mapping[str, Any]) -> str:
    return f"cause {safe(doc['cause'])}"


def _gradient(doc: Mapping[str, Any]) -> str:
    parts = [f"gradient norm {number(doc['l2'])}"]
    if "max_abs" in doc:
        parts.append(f"max |g| {number(doc['max_abs'])}")
    if "grad_vars" in doc:
        parts.append(f"over {_count(doc['grad_vars'], 'variable')}")
    return ", ".join(parts)


def _cosine(doc: Mapping[str, Any]) -> str:
    text = f"gradient cosine median {number(doc['cosine_median'])}"
    if "cosine_min" in doc:
        text += f" (min {number(doc['cosine_min'])})"
    if "cosine_steps" in doc:
        text += f" over {_count(doc['cosine_steps'], 'step')}"
    return text


def _tau(doc: Mapping[str, Any]) -> str:
    parts = []
    if "declared_tau" in doc:
        parts.append(f"declared tau {number(doc['declared_tau'])}")
    if "effective_tau" in doc:
        parts.append(f"effective tau {number(doc['effective_tau'])}")
    return ", ".join(parts)


def _moves(doc: Mapping[str, Any]) -> str:
    text = _count(doc["moves"], "move")
    if "unexplained_moves" in doc:
        text += f", {number(doc['unexplained_moves'])} of them unexplained"
    return text


def _grad_norms(doc: Mapping[str, Any]) -> str:
    parts = [
        f"{name} {number(doc[key])}"
        for key, name in (("grad_l2_median", "median"), ("grad_l2_max", "max"))
        if key in doc
    ]
    return "gradient norm " + ", ".join(parts)


def _span(doc: Mapping[str, Any]) -> str:
    return f"steps {number(doc['first_step'])} to {number(doc['last_step'])}"


def _targets(doc: Mapping[str, Any]) -> str:
    text = f"target {_names(doc['targets'])}"
    if "online" in doc:
        text += f" of online {_names(doc['online'])}"
    if "pairs_declared" in doc:
        text += " (a declared pair)" if doc["pairs_declared"] else " (paired by name)"
    return text


def _optimizers(doc: Mapping[str, Any]) -> str:
    if doc.get("other_optimizer"):
        return (
            f"optimizer steps {safe(doc['optimizer'])} (this loss's) and "
            f"{safe(doc['other_optimizer'])} (the other's)"
        )
    return f"optimizer step {safe(doc['optimizer'])}"


def _seen(doc: Mapping[str, Any]) -> str:
    text = f"seen at {_count(doc['steps_seen'], 'step')}"
    if "loss_recorded_steps" in doc:
        text += f" of the loss's {number(doc['loss_recorded_steps'])} recorded"
    return text


def _opposed(doc: Mapping[str, Any]) -> str:
    text = f"opposed at {_count(doc['steps_opposed'], 'step')}"
    if "steps_with_cosine" in doc:
        text += f" of {number(doc['steps_with_cosine'])} with a cosine"
    return text


def _online_path(doc: Mapping[str, Any]) -> str:
    text = f"online moved about {number(doc['online_path'])}"
    if "online_moves_recorded" in doc:
        text += f" over {_count(doc['online_moves_recorded'], 'recorded update')}"
    return text


def _drift_span(doc: Mapping[str, Any]) -> str:
    return f"drift {number(doc['drift_first'])} then {number(doc.get('drift_last'))}"


def _reverse(doc: Mapping[str, Any]) -> str:
    text = f"reverse tau {number(doc['tau_reverse'])}"
    if "residual_reverse" in doc:
        text += f" (residual {number(doc['residual_reverse'])})"
    return text


def _unmatched(doc: Mapping[str, Any]) -> str:
    if doc["unmatched"] == "run":
        return "the run recorded nothing the rule reads"
    text = f"nothing recorded matches the rule's {safe(doc['unmatched'])}"
    if "pairs" in doc:
        text += f" (recorded pairs: {_names(doc['pairs']) or 'none'})"
    return text


# Each phrase: the keys it words (the first must be present), and how.
_PHRASES: list[tuple[tuple[str, ...], Any]] = [
    (("cause",), _cause),
    (("missing_cut",), lambda d: f"no cut on {_path(d['missing_cut'])}"),
    (("path",), lambda d: f"gradient path {_path(d['path'])}"),
    (("cuts",), lambda d: f"existing cuts: {_names(d['cuts'])}"),
    (("needed_by",), lambda d: f"needed by {_names(d['needed_by'])}"),
    (("l2", "max_abs", "grad_vars"), _gradient),
    (("grad_l2_median", "grad_l2_max"), _grad_norms),
    (("grad_l2_max",), _grad_norms),
    (("grad_vars",), lambda d: f"{_count(d['grad_vars'], 'variable')} with a gradient"),
    (
        ("nonfinite",),
        lambda d: (
            "no non-finite element"
            if d["nonfinite"] == 0
            else f"{_count(d['nonfinite'], 'non-finite element')}"
        ),
    ),
    (("update_norm",), lambda d: f"applied update norm {number(d['update_norm'])}"),
    (("state",), lambda d: f"flow state at trace: {safe(d['state'])}"),
    (("anomaly",), lambda d: f"anomaly {safe(d['anomaly'])}"),
    (("drift",), lambda d: f"drift {number(d['drift'])} (relative to the online norm)"),
    (("declared_tau", "effective_tau"), _tau),
    (("effective_tau",), _tau),
    (("declared_every",), lambda d: f"declared every {number(d['declared_every'])} steps"),
    (("mode",), lambda d: f"update mode {safe(d['mode'])}"),
    (("moves", "unexplained_moves"), _moves),
    (("median_residual",), lambda d: f"median residual {number(d['median_residual'])}"),
    (("optimizer_scopes",), lambda d: f"written by an optimizer: {_names(d['optimizer_scopes'])}"),
    (("other_loss",), lambda d: f"other loss {safe(d['other_loss'])}"),
    (("cosine_median", "cosine_min", "cosine_steps"), _cosine),
    (("first_step", "last_step"), _span),
    (("steps_seen", "loss_recorded_steps"), _seen),
    (("loss_recorded_steps",), lambda d: f"{_count(d['loss_recorded_steps'], 'recorded step')}"),
    (("targets", "online", "pairs_declared"), _targets),
    (
        ("online_updated_by_loss",),
        lambda d: (
            "the loss also updates the online network"
            if d["online_updated_by_loss"]
            else "the loss does not update the online network"
        ),
    ),
    (("optimizer", "other_optimizer"), _optimizers),
    (
        ("updates",),
        lambda d: (
            "its optimizer step applies it" if d["updates"] else "no optimizer step applies it"
        ),
    ),
    (("feeds_from",), lambda d: f"the judged scope reads the output of {safe(d['feeds_from'])}"),
    (("steps_opposed", "steps_with_cosine"), _opposed),
    (("cosine_by_step",), lambda d: f"cosines at {_count(len(d['cosine_by_step']), 'step')}"),
    (("distance",), lambda d: f"distance {number(d['distance'])}"),
    (("online_norm",), lambda d: f"online norm {number(d['online_norm'])}"),
    (("online_path", "online_moves_recorded"), _online_path),
    (("threshold",), lambda d: f"threshold {number(d['threshold'])}"),
    (("drift_first", "drift_last"), _drift_span),
    (("tau_reverse", "residual_reverse"), _reverse),
    (("online_step",), lambda d: f"online step {number(d['online_step'])}"),
    (("target_step",), lambda d: f"target step {number(d['target_step'])}"),
    (("points",), lambda d: f"at {_count(d['points'], 'recorded point')}"),
    (("at_steps",), lambda d: f"at steps {_generic(d['at_steps'])}"),
    (("unmatched", "pairs"), _unmatched),
]

# The evidence keys worded above; any other is shown as "key value".
WORDED_KEYS = frozenset(key for keys, _ in _PHRASES for key in keys)


def evidence_sentences(doc: Mapping[str, Any]) -> list[str]:
    """An event's or finding's evidence as short phrases with their numbers
    (`check`, `doctor` and the tab show these): known keys worded, any other
    key as "key value", `at` left out (the caller says when)."""
    left = {k: v for k, v in doc.items() if k != "at"}
    if left.get("path") is not None and left.get("path") == left.get("missing_cut"):
        left.pop("path")
    out = []
    for keys, word in _PHRASES:
        if keys[0] not in left:
            continue
        out.append(word(left))
        for key in keys:
            left.pop(key, None)
    for key in sorted(left):
        out.append(f"{safe(key).replace('_', ' ')} {_generic(left[key])}")
    return out


def _generic(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        shown = [number(v) for v in value[:8]]
        return ", ".join(shown) + (f" (+{len(value) - 8} more)" if len(value) > 8 else "")
    if isinstance(value, Mapping):
        items = list(value.items())
        shown = ", ".join(f"{safe(k)}: {number(v)}" for k, v in items[:6])
        return "{" + shown + (f", +{len(items) - 6} more" if len(items) > 6 else "") + "}"
    return number(value)
