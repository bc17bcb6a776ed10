"""Gradscope records read through any TensorBoard DataProvider.

Lists a run's gradscope records (identified by their metadata content, never by
their tag), decodes tables into numpy arrays and blobs into JSON documents with
`tb_gradscope.format`, and skips what it cannot read (a newer format version,
malformed metadata or payload) with a warning naming the run, tag and reason.
The plugin reads `context.data_provider` with it, the command line a provider
over TensorBoard's Python ingestion (`read.logdir`); `read.runs` turns what it
returns into Python objects. Never imports tensorflow.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard import errors
from tensorboard.compat.proto import summary_pb2
from tensorboard.data import provider

from tb_gradscope import format as fmt

# Points kept per gradscope time series (tag) unless --gradscope_samples says
# otherwise. 10,000 recorded steps (a 1M-step run recorded every 100 steps)
# cost about 12.8 MB per tag of 64 scopes x 5 columns of float32.
DEFAULT_SAMPLES = 10_000

# What `downsample` means "keep everything" as: both backends treat a
# retention of 0 as "all", but a downsample of 0 as "none".
_ALL = 2**31 - 1

# Blobs are read this many at a time. Each `read_blob` is one round trip to
# the data provider (one gRPC call to the Rust data server), so a run whose
# every step holds events would otherwise open at the speed of its latency.
BLOB_READERS = 16


@dataclasses.dataclass(frozen=True)
class Record:
    """One readable gradscope time series of a run.

    `version` changes whenever TensorBoard has loaded newer data for it (it
    is (max_step, max_wall_time[, max_length]) from the data provider listing).
    """

    tag: str
    info: fmt.RecordInfo
    version: tuple


@dataclasses.dataclass
class RunListing:
    """The gradscope records of one run, and those skipped with a reason."""

    run: str
    records: dict[str, Record] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def of_kind(self, kind: fmt.Kind) -> list[Record]:
        """Records of one kind, ordered by (name, tag)."""
        found = [r for r in self.records.values() if r.info.kind == kind]
        return sorted(found, key=lambda r: (r.info.name, len(r.tag), r.tag))

    @property
    def kinds(self) -> list[str]:
        return sorted({r.info.kind.value for r in self.records.values()})


@dataclasses.dataclass
class TableSeries:
    """A table record's kept steps: values[i] is the [scopes, columns] table
    at steps[i] (float32, as stored)."""

    record: Record
    steps: np.ndarray
    wall_times: np.ndarray
    values: np.ndarray

    def index_of(self, step: int) -> int | None:
        i = int(np.searchsorted(self.steps, step))
        return i if i < len(self.steps) and self.steps[i] == step else None


@dataclasses.dataclass(frozen=True)
class BlobStep:
    """The decoded documents of a blob record at one kept step."""

    step: int
    wall_time: float
    documents: list[Any]


class Reader:
    """Reads gradscope records through a TensorBoard `DataProvider`.

    Args:
      data_provider: `context.data_provider` in the plugin, or
        `local_data_provider(logdir)` elsewhere.
      downsample: points read per time series; 0 means all that are kept.
    """

    def __init__(self, data_provider: provider.DataProvider, downsample: int = DEFAULT_SAMPLES):
        if downsample < 0:
            raise ValueError(f"downsample must be >= 0 (0 = all), got {downsample}")
        self._provider = data_provider
        self._downsample = downsample or _ALL
        self._parsed: dict[bytes, tuple[fmt.RecordInfo, list[str]] | str] = {}
        self._lock = threading.Lock()

    def list_runs(self, ctx, experiment_id: str) -> dict[str, RunListing]:
        """Every run with at least one gradscope record (readable or not)."""
        return self._list(ctx, experiment_id, None)

    def list_run(self, ctx, experiment_id: str, run: str) -> RunListing | None:
        """One run's records, or None when it has no gradscope data."""
        return self._list(ctx, experiment_id, run).get(run)

    def read_tables(
        self, ctx, experiment_id: str, run: str, records: Iterable[Record]
    ) -> tuple[dict[str, TableSeries], dict[str, list[str]]]:
        """Decodes table records; steps whose table is malformed are skipped
        and reported in the returned {tag: [warning]}.

        TensorBoard converts every stored tensor of a series when it is read
        (`tensor_util.make_ndarray`): one tensor it cannot convert fails the
        whole read. The tags are then read one at a time, and a tag that still
        fails is skipped whole, with a warning naming it and the error."""
        records = {r.tag: r for r in records}
        if not records:
            return {}, {}
        data, failed = self._read_tensors(ctx, experiment_id, run, list(records))
        out: dict[str, TableSeries] = {}
        warnings: dict[str, list[str]] = {
            tag: [_skip_message(run, tag, reason)] for tag, reason in failed.items()
        }
        for tag, record in records.items():
            if tag in failed:
                continue
            series, problem = _decode_series(record, data.get(tag, []))
            if problem:
                warnings[tag] = [_skip_message(run, tag, problem)]
            if series is not None:
                out[tag] = series
        return out, warnings

    def _read_tensors(
        self, ctx, experiment_id: str, run: str, tags: Sequence[str]
    ) -> tuple[dict[str, list], dict[str, str]]:
        """({tag: data}, {tag: why it cannot be read}) of one run's tensor tags."""
        try:
            data = self._provider.read_tensors(
                ctx,
                experiment_id=experiment_id,
                plugin_name=fmt.PLUGIN_NAME,
                downsample=self._downsample,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=list(tags)),
            ).get(run, {})
            return data, {}
        except errors.PublicError:
            raise
        except Exception as e:  # TensorBoard's conversion of a damaged tensor
            if len(tags) > 1:
                data, failed = {}, {}
                for tag in tags:
                    one, bad = self._read_tensors(ctx, experiment_id, run, [tag])
                    data.update(one)
                    failed.update(bad)
                return data, failed
            reason = (
                f"TensorBoard cannot convert one of its stored tensors ({type(e).__name__}: "
                f"{_clip(str(e))}); none of its steps can be shown"
            )
            return {}, {tags[0]: reason}

    def read_blobs(
        self,
        ctx,
        experiment_id: str,
        run: str,
        records: Iterable[Record],
        known: Mapping[str, list[BlobStep]] | None = None,
    ) -> tuple[dict[str, list[BlobStep]], dict[str, list[str]]]:
        """Decodes blob records; documents that are not JSON are skipped and
        reported in the returned {tag: [warning]} (naming their step).

        `known` holds steps already decoded for a tag (same metadata): a step
        with the same wall time and blob count is reused, not read again.
        The others' blobs are read BLOB_READERS at a time."""
        records = {r.tag: r for r in records}
        if not records:
            return {}, {}
        warnings: dict[str, list[str]] = {}
        try:
            data = self._provider.read_blob_sequences(
                ctx,
                experiment_id=experiment_id,
                plugin_name=fmt.PLUGIN_NAME,
                downsample=self._downsample,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=list(records)),
            ).get(run, {})
        except errors.PublicError:
            raise
        except Exception as e:
            reason = f"TensorBoard cannot list its blobs ({type(e).__name__}: {_clip(str(e))})"
            return {}, {tag: [_skip_message(run, tag, reason)] for tag in records}
        plans: dict[str, list] = {}
        wanted = []
        for tag in records:
            reusable = {(b.step, b.wall_time): b for b in (known or {}).get(tag, [])}
            plans[tag] = []
            for datum in data.get(tag, []):
                seen = reusable.get((int(datum.step), float(datum.wall_time)))
                if seen is not None and len(seen.documents) == len(datum.values):
                    plans[tag].append(seen)
                else:
                    plans[tag].append(datum)
                    wanted += [ref.blob_key for ref in datum.values]
        blobs, failures = self._read_blob_keys(ctx, wanted)
        out: dict[str, list[BlobStep]] = {}
        for tag in records:
            steps = []
            for item in plans[tag]:
                if isinstance(item, BlobStep):
                    steps.append(item)
                    continue
                documents = []
                for index, ref in enumerate(item.values):
                    blob = f"(blob {index + 1} of {len(item.values)})"
                    if ref.blob_key in failures:
                        reason = f"step {item.step}: {failures[ref.blob_key]} {blob}"
                        warnings.setdefault(tag, []).append(_skip_message(run, tag, reason))
                        continue
                    try:
                        documents.append(fmt.decode_json(blobs[ref.blob_key]))
                    except fmt.FormatError as e:
                        warnings.setdefault(tag, []).append(
                            _skip_message(run, tag, f"step {item.step}: {e} {blob}")
                        )
                steps.append(BlobStep(int(item.step), float(item.wall_time), documents))
            out[tag] = steps
        return out, {tag: _summarised(found) for tag, found in warnings.items()}

    def _read_blob_keys(self, ctx, keys: list[str]) -> tuple[dict[str, bytes], dict[str, str]]:
        """({key: bytes}, {key: why it cannot be read}), BLOB_READERS at a time."""

        def read(key: str) -> tuple[str, bytes | None, str]:
            try:
                return key, self._provider.read_blob(ctx, blob_key=key), ""
            except errors.PublicError as e:
                # The Rust data server cannot read back blob keys of runs
                # whose name holds a quote or backslash.
                return (
                    key,
                    None,
                    f"the data provider cannot read it ({_clip(str(e))}); try --load_fast=false",
                )
            except Exception as e:  # TensorBoard's conversion of a damaged tensor
                return (
                    key,
                    None,
                    f"TensorBoard cannot convert it ({type(e).__name__}: {_clip(str(e))})",
                )

        if len(keys) <= 2:
            results = [read(key) for key in keys]
        else:
            with concurrent.futures.ThreadPoolExecutor(min(BLOB_READERS, len(keys))) as pool:
                results = list(pool.map(read, keys))
        blobs = {key: blob for key, blob, _ in results if blob is not None}
        failures = {key: reason for key, blob, reason in results if blob is None}
        return blobs, failures

    def _list(self, ctx, experiment_id: str, run: str | None) -> dict[str, RunListing]:
        run_filter = provider.RunTagFilter(runs=[run]) if run is not None else None
        kwargs = dict(
            experiment_id=experiment_id, plugin_name=fmt.PLUGIN_NAME, run_tag_filter=run_filter
        )
        tensors = self._provider.list_tensors(ctx, **kwargs)
        blobs = self._provider.list_blob_sequences(ctx, **kwargs)
        listings: dict[str, RunListing] = {}
        for data_class, mapping in (
            (summary_pb2.DATA_CLASS_TENSOR, tensors),
            (summary_pb2.DATA_CLASS_BLOB_SEQUENCE, blobs),
        ):
            for run_name, tags in mapping.items():
                listing = listings.setdefault(run_name, RunListing(run_name))
                for tag, series in tags.items():
                    parsed = self._parse(series.plugin_content)
                    if isinstance(parsed, str):
                        listing.warnings.append(_skip_message(run_name, tag, parsed))
                        continue
                    info, problems = parsed
                    if fmt.KIND_SPECS[info.kind].data_class != data_class:
                        listing.warnings.append(
                            _skip_message(
                                run_name, tag, f"{info.kind.value} stored with the wrong data class"
                            )
                        )
                        continue
                    listing.warnings += [f"run {run_name!r} tag {tag!r}: {p}" for p in problems]
                    version = (
                        series.max_step,
                        series.max_wall_time,
                        getattr(series, "max_length", None),
                    )
                    listing.records[tag] = Record(tag, info, version)
        for listing in listings.values():
            listing.warnings.sort()
        return listings

    def _parse(self, content: bytes) -> tuple[fmt.RecordInfo, list[str]] | str:
        """Metadata content -> (RecordInfo, problems with its attrs), or the
        reason it cannot be read."""
        with self._lock:
            cached = self._parsed.get(content)
        if cached is not None:
            return cached
        try:
            parsed: tuple[fmt.RecordInfo, list[str]] | str = fmt.read_plugin_content(content)
        except fmt.FormatError as e:
            parsed = str(e)
        with self._lock:
            if len(self._parsed) > 4096:
                self._parsed.clear()
            self._parsed[content] = parsed
        return parsed


def _decode_series(record: Record, data: list) -> tuple[TableSeries | None, str]:
    """Stacks a table record's data; returns (series, problem)."""
    steps, walls, tables, bad = [], [], [], []
    for datum in data:
        try:
            table = fmt.decode_table(record.info, datum.numpy)
        except fmt.FormatError as e:
            bad.append((datum.step, str(e)))
            continue
        steps.append(datum.step)
        walls.append(datum.wall_time)
        tables.append(table.values)
    problem = ""
    if bad:
        problem = (
            f"{len(bad)} of {len(data)} steps unreadable (first: step {bad[0][0]}: {bad[0][1]})"
        )
    if not tables:
        return None, problem or "no data"
    step_arr = np.asarray(steps, dtype=np.int64)
    order = np.argsort(step_arr, kind="stable")
    step_arr = step_arr[order]
    last = np.append(step_arr[1:] != step_arr[:-1], True)  # a step written twice: keep the later
    keep = order[last]
    return (
        TableSeries(
            record=record,
            steps=step_arr[last],
            wall_times=np.asarray(walls, dtype=np.float64)[keep],
            values=np.stack(tables).astype(np.float32)[keep],
        ),
        problem,
    )


def _skip_message(run: str, tag: str, reason: str) -> str:
    return f"run {run!r} tag {tag!r}: skipped: {reason}"


def _summarised(warnings: list[str], shown: int = 5) -> list[str]:
    """At most `shown` warnings of one tag, then how many more there were."""
    if len(warnings) <= shown:
        return warnings
    return warnings[:shown] + [f"... and {len(warnings) - shown} more like these"]


def _clip(text: str, limit: int = 200) -> str:
    """One line of at most `limit` characters of an error's text."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
