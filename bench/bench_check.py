"""Cost of `tb-gradscope check` over a long run, against TensorBoard's bare ingestion.

One run: 4 losses x 64 scopes of grad_stats, update_stats, a FlowGraph, at
N recorded steps (quick: 300, full: 3000), written twice: clean (gradient only
where the FlowGraph says `updates`, no rule broken) and leaky (gradient
everywhere: every rule broken at every step, the worst case). Candidates: load
the logdir and check 6 rules at trace time and every step (what
`check --rules` does). Baseline: TensorBoard's own multiplexer loading the same
clean logdir and reading every gradscope tensor, the least any reader must do.
Headline: clean check time / baseline.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from bench import harness
from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.read import logdir as logs_lib
from tb_gradscope.read.violations import evaluate

SCOPES = tuple(s for i in range(8) for s in (f"net{i}", *(f"net{i}/layer{j}" for j in range(7))))
LOSSES = ("td", "aux", "entropy", "reward")
RULES = [
    rules_lib.parse_rule(r)
    for r in (
        "never(td, net7/*)",
        "never(aux, net6)",
        "only(entropy, [net0/*, net1/*])",
        "blocked(reward, net5/*)",
        "never(*, net4/layer3)",
        "only(td, [net0/*, net1/*, net2/*])",
    )
]


_FLOWING = np.array([s.startswith(("net0", "net1")) for s in SCOPES])


def _flowgraph() -> fmt.FlowGraph:
    cells = {
        loss: {s: fmt.UPDATES if s.startswith(("net0", "net1")) else fmt.BLOCKED for s in SCOPES}
        for loss in LOSSES
    }
    return fmt.FlowGraph(
        losses=[fmt.LossInfo(loss) for loss in LOSSES], scopes=list(SCOPES), cells=cells
    )


def write_logdir(root: str, steps: int, leaky: bool) -> None:
    writer = EventFileWriter(os.path.join(root, "run"))
    rng = np.random.default_rng(0)
    infos = [fmt.make_info(fmt.Kind.GRAD_STATS, loss, SCOPES) for loss in LOSSES]
    infos.append(fmt.make_info(fmt.Kind.UPDATE_STATS, "", SCOPES))
    graph_info = fmt.make_info(fmt.Kind.FLOWGRAPH)
    for step in range(steps):
        summary = summary_pb2.Summary()
        for info in infos:
            table = rng.random((len(SCOPES), len(info.columns)), dtype=np.float32)
            if info.kind == fmt.Kind.GRAD_STATS and not leaky:
                table[~_FLOWING] = 0.0  # grad_vars 0: no gradient outside net0/net1
            value = summary.value.add(tag=fmt.tag_for(info.kind, info.name))
            value.tensor.CopyFrom(tensor_util.make_tensor_proto(fmt.encode_table(info, table)))
            if step == 0:
                value.metadata.CopyFrom(fmt.create_summary_metadata(info))
        if step == 0:
            value = summary.value.add(tag=fmt.tag_for(fmt.Kind.FLOWGRAPH))
            blobs = fmt.encode_blobs(graph_info, [_flowgraph().to_json()])
            value.tensor.CopyFrom(tensor_util.make_tensor_proto(np.array(blobs, dtype=object)))
            value.metadata.CopyFrom(fmt.create_summary_metadata(graph_info))
        writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary))
    writer.close()


def check(root: str) -> int:
    found = 0
    for logs in logs_lib.load_logdir(root):
        found += len(evaluate(logs, RULES))
    return found


def bare_ingestion(root: str) -> int:
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={fmt.PLUGIN_NAME: 0}
    )
    multiplexer.AddRunsFromDirectory(root)
    multiplexer.Reload()
    provider = mux_provider.MultiplexerDataProvider(multiplexer, root)
    data = provider.read_tensors(
        tb_context.RequestContext(),
        experiment_id="",
        plugin_name=fmt.PLUGIN_NAME,
        downsample=2**31 - 1,
    )
    return sum(len(series) for tags in data.values() for series in tags.values())


def main() -> None:
    args = harness.parse_args(__doc__)
    steps, repetitions = (300, 3) if args.quick else (3000, 5)
    logs_lib._prefer_tensorflow_stub()  # both sides read without tensorflow, like the CLI
    with tempfile.TemporaryDirectory() as clean, tempfile.TemporaryDirectory() as leaky:
        write_logdir(clean, steps, leaky=False)
        write_logdir(leaky, steps, leaky=True)
        found = {"clean": check(clean), "leaky": check(leaky)}
        medians = harness.interleaved_medians(
            {
                "clean": lambda: check(clean),
                "leaky": lambda: check(leaky),
                "ingestion": lambda: bare_ingestion(clean),
            },
            repetitions,
        )
    harness.report("check_steps", steps)
    harness.report("check_scopes", len(SCOPES))
    harness.report("check_losses", len(LOSSES))
    harness.report("check_clean_violations", found["clean"])
    harness.report("check_leaky_violations", found["leaky"])
    harness.report("check_baseline_ingestion_seconds", medians["ingestion"])
    harness.report("check_clean_seconds", medians["clean"])
    harness.report("check_leaky_seconds", medians["leaky"])
    harness.report("check_clean_ms_per_step", 1000 * medians["clean"] / steps)
    harness.report("check_leaky_over_ingestion_ratio", medians["leaky"] / medians["ingestion"])
    harness.report("check_clean_over_ingestion_ratio", medians["clean"] / medians["ingestion"])


if __name__ == "__main__":
    main()
