"""Cost of one step of format encode + decode, 64 scopes x 3 losses.

Baseline: the same numbers written the way hand-rolled logging does it, one
scalar summary value per (loss, scope, stat). Headline: our time / baseline.
"""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

from bench import harness
from tb_gradscope import format as fmt

SCOPES = [f"net{i // 8}/layer{i % 8}" for i in range(64)]
LOSSES = ["td", "aux", "entropy"]


def _ours(tables: dict[str, np.ndarray], infos: dict[str, fmt.RecordInfo]) -> None:
    summary = summary_pb2.Summary()
    for loss, table in tables.items():
        summary.value.add(
            tag=fmt.tag_for(fmt.Kind.GRAD_STATS, loss),
            tensor=tensor_util.make_tensor_proto(fmt.encode_table(infos[loss], table)),
        )
    parsed = summary_pb2.Summary.FromString(summary.SerializeToString())
    for value, loss in zip(parsed.value, tables):
        fmt.decode_table(infos[loss], tensor_util.make_ndarray(value.tensor))


def _per_value_scalars(tables: dict[str, np.ndarray]) -> None:
    summary = summary_pb2.Summary()
    columns = fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns
    for loss, table in tables.items():
        for i, scope in enumerate(SCOPES):
            for j, column in enumerate(columns):
                summary.value.add(
                    tag=f"{loss}/{scope}/{column}",
                    tensor=tensor_util.make_tensor_proto(np.float32(table[i, j])),
                )
    parsed = summary_pb2.Summary.FromString(summary.SerializeToString())
    for value in parsed.value:
        tensor_util.make_ndarray(value.tensor)


def main() -> None:
    args = harness.parse_args(__doc__)
    rng = np.random.default_rng(0)
    columns = len(fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns)
    tables = {loss: rng.random((len(SCOPES), columns), dtype=np.float32) for loss in LOSSES}
    infos = {loss: fmt.make_info(fmt.Kind.GRAD_STATS, loss, SCOPES) for loss in LOSSES}
    medians = harness.interleaved_medians(
        {"ours": lambda: _ours(tables, infos), "scalars": lambda: _per_value_scalars(tables)},
        repetitions=50 if args.quick else 500,
    )
    harness.report("values_per_step", len(LOSSES) * len(SCOPES) * columns)
    harness.report("format_step_seconds", medians["ours"])
    harness.report("per_value_scalars_step_seconds", medians["scalars"])
    harness.report("format_step_ratio_vs_per_value_scalars", medians["ours"] / medians["scalars"])


if __name__ == "__main__":
    main()
