"""Per-run cache of decoded gradscope series.

The data provider has no "read step S": it returns whole series. The cache
keeps each run's decoded tables and blobs, the `read.runs.RunLogs` the
routes read them through (decoded once per change) and what the findings and
violations routes conclude from it (computed once per change), and asks the provider for the run's
listing (at most once per `refresh_seconds`); a record whose listing changed
(newer max step or wall time, a new tag, a new metadata content) is read again,
the others are reused. So "the matrix at step S" costs at most one listing, not
a series read. The listing is throttled because it is not free (the Rust data
server walks every kept point of a tensor series to list it: ~10 us a point),
while TensorBoard itself only loads new data every --reload_interval seconds.

The throttle never serves data older than a listing already given out: every
run's listing (what the status and runs routes answer) and each run's own are
asked apart, so when the first says something else of a run than its cached
data, the run is listed again at its next request, within its second or not.
Else the tab, told by the status route that a run changed, could load the
run's older data and never be told again.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import time

from tb_gradscope import format as fmt
from tb_gradscope.read.findings import Finding, diagnose
from tb_gradscope.read.reader import BlobStep, Reader, Record, RunListing, TableSeries
from tb_gradscope.read.runs import RunLogs, decode_run
from tb_gradscope.read.violations import RunCheck, check_run

# Runs whose decoded data stay in memory (least recently used dropped first).
DEFAULT_MAX_RUNS = 16

# A run's listing is asked for at most this often (seconds).
DEFAULT_REFRESH_SECONDS = 1.0


@dataclasses.dataclass
class RunData:
    """One run's records as of one data-provider listing: what a refresh
    compares and reuses (the listing, the series and documents read, the
    read warnings), the run decoded from them (`logs`) and what is
    concluded from it (`findings`, `checked`). A listing that says anything
    new makes a new RunData, so none of them is ever stale.
    """

    listing: RunListing
    tables: dict[str, TableSeries]
    blobs: dict[str, list[BlobStep]]
    read_warnings: dict[str, list[str]]
    checked_at: float = 0.0

    @functools.cached_property
    def logs(self) -> RunLogs:
        """The run decoded as `tb-gradscope` decodes it (`read.runs.decode_run`)."""
        return decode_run(self.listing, self.tables, self.blobs, self.read_warnings)

    @functools.cached_property
    def findings(self) -> list[Finding]:
        """What `tb-gradscope doctor` finds in the run (`read.findings.diagnose`)."""
        return diagnose(self.logs)

    @functools.cached_property
    def checked(self) -> RunCheck:
        """The run's violations with no rules file (`read.violations.check_run`)."""
        return check_run(self.logs)


class RunCache:
    """Decoded data per (experiment, run), refreshed when TensorBoard has
    newer data.

    Thread-safe: TensorBoard serves requests on several threads; a run is
    refreshed by one of them while the others wait for the result.
    """

    def __init__(
        self,
        reader: Reader,
        max_runs: int = DEFAULT_MAX_RUNS,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ):
        self._reader = reader
        self._max_runs = max_runs
        self._refresh_seconds = refresh_seconds
        self.listings = 0  # listings asked of the provider, for tests
        self._entries: collections.OrderedDict[tuple[str, str], RunData] = collections.OrderedDict()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._run_listings: dict[str, tuple[float, dict[str, RunListing]]] = {}
        # When a listing of every run, answered then, said something else of
        # the run than its cached data (or the run had none cached).
        self._contradicted: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.reads = 0  # records (re)read from the provider, for tests

    def list_runs(self, ctx, experiment_id: str) -> dict[str, RunListing]:
        """Every run's listing, asked of the provider at most once per
        `refresh_seconds` (listing all runs costs what listing each does)."""
        now = time.monotonic()
        with self._lock:
            cached = self._run_listings.get(experiment_id)
        if cached is not None and now - cached[0] < self._refresh_seconds:
            return cached[1]
        listings = self._reader.list_runs(ctx, experiment_id)
        self.listings += 1
        answered = time.monotonic()
        with self._lock:
            self._run_listings[experiment_id] = (now, listings)
            for run, listing in listings.items():
                data = self._entries.get((experiment_id, run))
                if data is None or not _agree(listing, data.listing):
                    self._contradicted[(experiment_id, run)] = answered
            for exp, run in self._entries:
                if exp == experiment_id and run not in listings:
                    self._contradicted[(exp, run)] = answered
        return listings

    def get(self, ctx, experiment_id: str, run: str) -> RunData | None:
        """The run's current data, or None when it has no gradscope data."""
        key = (experiment_id, run)
        with self._lock:
            run_lock = self._locks.setdefault(key, threading.Lock())
        with run_lock:
            with self._lock:
                old = self._entries.get(key)
            now = time.monotonic()
            if old is not None and self._fresh(key, old, now):
                self._touch(key)
                return old
            listing = self._reader.list_run(ctx, experiment_id, run)
            self.listings += 1
            if listing is None:
                self._drop(key)
                return None
            if old is not None and old.listing.records == listing.records:
                if old.listing.warnings == listing.warnings:
                    old.checked_at = now
                    self._touch(key)
                    return old
                data = dataclasses.replace(old, listing=listing)
            else:
                data = self._refresh(ctx, experiment_id, listing, old)
            data.checked_at = now
            with self._lock:
                self._entries[key] = data
                self._entries.move_to_end(key)
                while len(self._entries) > self._max_runs:
                    self._entries.popitem(last=False)
            return data

    def _fresh(self, key: tuple[str, str], data: RunData, now: float) -> bool:
        """Whether `data` may be served without listing the run: asked for
        within `refresh_seconds`, and no listing of every run answered since
        it was asked says otherwise (which of the two is newer cannot be told,
        so the run is listed again: once per such listing at most)."""
        with self._lock:
            contradicted = self._contradicted.get(key)
        recent = now - data.checked_at < self._refresh_seconds
        return recent and (contradicted is None or contradicted <= data.checked_at)

    def _refresh(
        self, ctx, experiment_id: str, listing: RunListing, old: RunData | None
    ) -> RunData:
        tables: dict[str, TableSeries] = {}
        blobs: dict[str, list[BlobStep]] = {}
        warnings: dict[str, list[str]] = {}
        stale_tables: list[Record] = []
        stale_blobs: list[Record] = []
        for tag, record in listing.records.items():
            unchanged = old is not None and old.listing.records.get(tag) == record
            is_table = fmt.KIND_SPECS[record.info.kind].is_table
            if unchanged and (tag in old.tables or tag in old.blobs or tag in old.read_warnings):
                if tag in old.tables:
                    tables[tag] = old.tables[tag]
                if tag in old.blobs:
                    blobs[tag] = old.blobs[tag]
                if tag in old.read_warnings:
                    warnings[tag] = old.read_warnings[tag]
            elif is_table:
                stale_tables.append(record)
            else:
                stale_blobs.append(record)
        read_tables, table_warnings = self._reader.read_tables(
            ctx, experiment_id, listing.run, stale_tables
        )
        known = {
            r.tag: old.blobs[r.tag]
            for r in stale_blobs
            if old is not None and r.tag in old.blobs and old.listing.records[r.tag].info == r.info
        }
        read_blobs, blob_warnings = self._reader.read_blobs(
            ctx, experiment_id, listing.run, stale_blobs, known
        )
        self.reads += len(stale_tables) + len(stale_blobs)
        tables.update(read_tables)
        blobs.update(read_blobs)
        warnings.update(table_warnings)
        warnings.update(blob_warnings)
        return RunData(listing=listing, tables=tables, blobs=blobs, read_warnings=warnings)

    def _touch(self, key: tuple[str, str]) -> None:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)

    def _drop(self, key: tuple[str, str]) -> None:
        """Forgets a run without gradscope data (and its lock: names of
        unknown runs come from URLs and must not accumulate)."""
        with self._lock:
            self._entries.pop(key, None)
            self._locks.pop(key, None)
            self._contradicted.pop(key, None)


def _agree(a: RunListing, b: RunListing) -> bool:
    """Whether two listings of a run say the same of it (same records, same warnings)."""
    return a.records == b.records and a.warnings == b.warnings
