"""A logdir's gradscope records, per run, for `report` and `check`.

Reads through TensorBoard's own ingestion (`plugin.reader.local_data_provider`,
the Python multiplexer) and the plugin's `Reader`, so the command line sees
exactly what the Gradscope tab sees, keeping every recorded step. Series of
the same (kind, name) written under several layout tags (`~1`, `~2`) are
merged by step. Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import stat
import struct
import sys
import tempfile
import types
from typing import Mapping

from tensorboard import context as tb_context

from tb_gradscope import format as fmt
from tb_gradscope.plugin import reader as reader_lib

EXPERIMENT = ""
# Key of the FLOWGRAPH record's metadata attrs under which a run lists the
# rules it was trained with (compact strings, e.g. "never(td, target/*)").
RULES_ATTR = "rules"


class LogdirError(Exception):
    """The logdir cannot be used; the message says why and what to do."""


@dataclasses.dataclass
class RunLogs:
    """One run's decoded gradscope records (every kept step)."""

    run: str
    grads: dict[int, dict[str, fmt.Table]] = dataclasses.field(default_factory=dict)
    updates: dict[int, fmt.Table] = dataclasses.field(default_factory=dict)
    drift: dict[str, list[tuple[int, fmt.Table]]] = dataclasses.field(default_factory=dict)
    conflict: dict[str, list[tuple[int, fmt.Table]]] = dataclasses.field(default_factory=dict)
    flowgraphs: list[tuple[int, fmt.FlowGraph]] = dataclasses.field(default_factory=list)
    recorded_rules: list[str] = dataclasses.field(default_factory=list)
    events: list[fmt.Event] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    grad_records: int = 0  # GRAD_STATS tags listed, readable or not

    @property
    def grads_unreadable(self) -> bool:
        """The run has gradient tables, but not one step of them could be read."""
        return self.grad_records > 0 and not self.grads

    @property
    def steps(self) -> list[int]:
        """Steps with gradient or update tables, ascending."""
        return sorted(set(self.grads) | set(self.updates))

    @property
    def last_step(self) -> int:
        candidates = self.steps + [s for s, _ in self.flowgraphs] + [e.step for e in self.events]
        candidates += [s for series in self.drift.values() for s, _ in series]
        return max(candidates, default=0)

    def flowgraph_at(self, step: int) -> fmt.FlowGraph | None:
        """The FlowGraph in force at `step`: the latest written at or before it
        (or the first one, for steps recorded before any trace was written)."""
        chosen = None
        for written, graph in self.flowgraphs:
            if written <= step or chosen is None:
                chosen = graph
        return chosen


def load_logdir(logdir: str, run: str | None = None) -> list[RunLogs]:
    """Every run of `logdir` holding gradscope records (or only `run`).

    Raises:
      LogdirError: the logdir is missing, has no gradscope data, or has no
        run named `run`.
    """
    if not os.path.isdir(logdir):
        raise LogdirError(f"logdir {logdir!r} does not exist or is not a directory")
    _prefer_tensorflow_stub()
    unsafe = unsafe_event_files(logdir)
    if unsafe:
        with tempfile.TemporaryDirectory(prefix="gradscope_read_") as mirror:
            _mirror_safe_part(logdir, mirror, unsafe)
            provider = reader_lib.local_data_provider(mirror, samples=0)  # loads everything now
    else:
        provider = reader_lib.local_data_provider(logdir, samples=0)
    reader = reader_lib.Reader(provider, downsample=0)
    ctx = tb_context.RequestContext()
    listings = reader.list_runs(ctx, EXPERIMENT)
    if not listings:
        all_runs = sorted(r.run_name for r in provider.list_runs(ctx, experiment_id=EXPERIMENT))
        found = f"{len(all_runs)} TensorBoard run(s), none with" if all_runs else "no event files and no"
        skipped = "".join(f"; {problem.message}" for problem in unsafe.values())
        raise LogdirError(
            f"logdir {logdir!r} has no gradscope data ({found} gradscope records{skipped}); "
            "record training with tb_gradscope.Recorder, or point at the right logdir"
        )
    if not any(listing.records for listing in listings.values()):
        reasons = [w for listing in listings.values() for w in listing.warnings]
        raise LogdirError(
            f"logdir {logdir!r} has gradscope records but none can be read: "
            + "; ".join(reasons[:3]) + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")
        )
    if run is not None:
        if run not in listings:
            raise LogdirError(f"run {run!r} has no gradscope data in {logdir!r}; runs: {sorted(listings)}")
        listings = {run: listings[run]}
    loaded = [_load_run(reader, ctx, listings[name]) for name in sorted(listings)]
    for logs in loaded:
        logs.warnings.extend(p.message for p in unsafe.values() if p.run == logs.run and p.keep is None)
        logs.warnings.extend(damaged_event_files(logdir, logs.run))
    return loaded


# No event can be this long (protobuf messages stop at 2 GiB): a record header
# claiming more is damage, and TensorBoard's loaders would try to allocate it
# (the Python one raises MemoryError, the Rust data server aborts).
MAX_RECORD_BYTES = 2**31


@dataclasses.dataclass(frozen=True)
class UnsafeFile:
    """An event file TensorBoard's loader must not be handed as it is.

    `keep` is how many leading bytes are safe to read (None: none, the file
    is not a regular file: a FIFO would block the loader forever)."""

    run: str
    path: str
    keep: int | None
    message: str


def unsafe_event_files(logdir: str) -> dict[str, UnsafeFile]:
    """{path: problem} of event files named like TensorBoard's under `logdir`
    that are not regular files, or whose record header claims more bytes
    than any event can hold. Checked with stat and record headers only, so
    neither a FIFO nor a huge file is read."""
    found = {}
    for directory, _, names in os.walk(logdir):
        run = os.path.relpath(directory, logdir)
        run = "." if run == os.curdir else run
        for name in sorted(n for n in names if "tfevents" in n):
            path = os.path.join(directory, name)
            try:
                mode = os.stat(path).st_mode
            except OSError as e:
                found[path] = UnsafeFile(run, path, None, f"run {run!r}: event file {name!r} cannot be read ({e.strerror}): skipped")
                continue
            if not stat.S_ISREG(mode):
                what = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
                found[path] = UnsafeFile(run, path, None, f"run {run!r}: event file {name!r} is {what}: not read")
                continue
            oversized = _oversized_record(path)
            if oversized is not None:
                offset, n, length = oversized
                found[path] = UnsafeFile(
                    run, path, offset,
                    f"run {run!r}: event file {name!r} is damaged: record {n} (byte {offset}) claims "
                    f"{length} bytes, more than an event can hold; only the {n} records before it are read",
                )
    return found


def _oversized_record(path: str) -> tuple[int, int, int] | None:
    """(offset, index, claimed length) of the first record whose header
    (with a valid CRC, as TensorBoard checks it) claims MAX_RECORD_BYTES or more."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            pos, n = 0, 0
            while pos + 12 <= size:
                f.seek(pos)
                header = f.read(12)
                (length,) = struct.unpack("<Q", header[:8])
                if struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
                    return None  # TensorBoard stops here without allocating
                if length >= MAX_RECORD_BYTES:
                    return pos, n, length
                pos, n = pos + 16 + length, n + 1
    except OSError:
        return None
    return None


def _mirror_safe_part(logdir: str, mirror: str, unsafe: Mapping[str, UnsafeFile]) -> None:
    """Recreates the runs of `logdir` under `mirror` from symlinks to its safe
    event files and copies of the safe prefix of the damaged ones."""
    for directory, _, names in os.walk(logdir):
        target = os.path.join(mirror, os.path.relpath(directory, logdir))
        for name in (n for n in names if "tfevents" in n):
            path = os.path.join(directory, name)
            os.makedirs(target, exist_ok=True)
            problem = unsafe.get(path)
            if problem is None:
                os.symlink(os.path.abspath(path), os.path.join(target, name))
            elif problem.keep:
                with open(path, "rb") as src, open(os.path.join(target, name), "wb") as dst:
                    _copy_prefix(src, dst, problem.keep)


def _copy_prefix(src, dst, size: int, chunk: int = 1 << 20) -> None:
    while size > 0:
        data = src.read(min(chunk, size))
        if not data:
            return
        dst.write(data)
        size -= len(data)


# Data CRCs are checked in pure Python (TensorBoard's stub): up to this many
# bytes per file; beyond it, only the framing and the length CRCs.
CRC_CHECK_BYTES = 64 << 20


def damaged_event_files(logdir: str, run: str) -> list[str]:
    """Warnings for event files of `run` that TensorBoard stops reading early.

    Both data providers stop reading an event file at its first damaged
    record (bad CRC, bad length) and say nothing to the plugin, so whatever
    follows is lost; a record cut short at the end (training killed mid-write,
    or a writer still writing) loses only itself. TFRecord framing: u64 length,
    u32 masked CRC of the length, data, u32 masked CRC of the data.
    """
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    found = []
    run_dir = os.path.join(logdir, run)
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "*tfevents*"))):
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        pos, n, problem = 0, 0, None
        while pos < len(data) and problem is None:
            header = data[pos:pos + 12]
            if len(header) < 12:
                problem = "its last record is cut short (killed mid-write?)"
                break
            (length,) = struct.unpack("<Q", header[:8])
            if struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
                problem = f"record {n} (byte {pos}) has a bad length CRC"
            elif length >= MAX_RECORD_BYTES:
                problem = f"record {n} (byte {pos}) claims {length} bytes, more than an event can hold"
            elif pos + 16 + length > len(data):
                problem = "its last record is cut short (killed mid-write?)"
            elif pos + length <= CRC_CHECK_BYTES and struct.unpack(
                "<I", data[pos + 12 + length:pos + 16 + length]
            )[0] != masked_crc32c(data[pos + 12:pos + 12 + length]):
                problem = f"record {n} (byte {pos}) has a bad data CRC"
            else:
                pos, n = pos + 16 + length, n + 1
        if problem is None:
            continue
        rest = len(data) - pos
        lost = "" if "cut short" in problem else f"; TensorBoard reads no further: {rest} bytes after it are not shown"
        found.append(f"run {run!r}: event file {os.path.basename(path)!r} is damaged: {problem}{lost}")
    return found


def _prefer_tensorflow_stub() -> None:
    """Makes TensorBoard's ingestion use its bundled TF stub, not tensorflow.

    TensorBoard's event reading resolves `tensorboard.compat.tf` to the real
    tensorflow when it is installed (seconds of import for a read-only tool);
    the presence of a `tensorboard.compat.notf` module is TensorBoard's own
    switch to the stub. Done only when tensorflow is not loaded already.
    """
    if "tensorflow" not in sys.modules and "tensorboard.compat.notf" not in sys.modules:
        sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")


def _load_run(reader: reader_lib.Reader, ctx, listing: reader_lib.RunListing) -> RunLogs:
    logs = RunLogs(listing.run, warnings=list(listing.warnings))
    logs.grad_records = len(listing.of_kind(fmt.Kind.GRAD_STATS))
    tables = [r for r in listing.records.values() if fmt.KIND_SPECS[r.info.kind].is_table]
    blobs = [r for r in listing.records.values() if not fmt.KIND_SPECS[r.info.kind].is_table]
    series, warnings = reader.read_tables(ctx, EXPERIMENT, listing.run, tables)
    for tag in sorted(series):
        _add_table_series(logs, series[tag])
    documents, blob_warnings = reader.read_blobs(ctx, EXPERIMENT, listing.run, blobs)
    for tag in sorted(documents):
        _add_blob_series(logs, listing.records[tag], documents[tag])
    for found in (warnings, blob_warnings):
        for tag in sorted(found):
            logs.warnings.extend(found[tag])
    logs.flowgraphs.sort(key=lambda item: item[0])
    logs.events.sort(key=lambda e: (e.step, e.type, e.name))
    logs.warnings += [f"run {logs.run!r}: {e.message} (said at step {e.step})" for e in logs.events if e.type == fmt.DROPPED]
    for named in (logs.drift, logs.conflict):
        for name in named:
            named[name].sort(key=lambda item: item[0])
    return logs


def _add_table_series(logs: RunLogs, series: reader_lib.TableSeries) -> None:
    info = series.record.info
    if info.kind == fmt.Kind.GRAD_STATS:
        _add_rules(logs, info.attrs)  # an eager run's rules: it wrote no FlowGraph
    for step, values in zip(series.steps.tolist(), series.values):
        table = fmt.decode_table(info, values)
        if info.kind == fmt.Kind.GRAD_STATS:
            logs.grads.setdefault(step, {})[info.name] = table
        elif info.kind == fmt.Kind.UPDATE_STATS:
            logs.updates[step] = table
        elif info.kind == fmt.Kind.DRIFT:
            logs.drift.setdefault(info.name, []).append((step, table))
        elif info.kind == fmt.Kind.CONFLICT:
            logs.conflict.setdefault(info.name, []).append((step, table))


def _add_blob_series(logs: RunLogs, record: reader_lib.Record, steps: list[reader_lib.BlobStep]) -> None:
    kind = record.info.kind
    if kind == fmt.Kind.FLOWGRAPH:
        _add_rules(logs, record.info.attrs)
    for blob_step in steps:
        for document in blob_step.documents:
            try:
                if kind == fmt.Kind.FLOWGRAPH:
                    logs.flowgraphs.append((blob_step.step, fmt.FlowGraph.from_json(document)))
                elif kind == fmt.Kind.EVENTS:
                    logs.events.append(fmt.Event.from_json(document))
            except (fmt.FormatError, TypeError) as e:
                logs.warnings.append(
                    f"run {logs.run!r} tag {record.tag!r}: skipped a document at step {blob_step.step}: {e}"
                )


def _add_rules(logs: RunLogs, attrs: Mapping) -> None:
    rules = attrs.get(RULES_ATTR, [])
    if isinstance(rules, list):
        for rule in rules:
            if isinstance(rule, str) and rule not in logs.recorded_rules:
                logs.recorded_rules.append(rule)
