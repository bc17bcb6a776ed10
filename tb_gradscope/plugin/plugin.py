"""The Gradscope TensorBoard plugin: JSON/CSV routes over the data provider.

Each route is a thin werkzeug application that parses its parameters and calls
an `*_impl` method returning plain, JSON-safe data; CSV is made from that same
data. docs/HTTP_API.md is the contract with the frontend. Bad input raises
TensorBoard's InvalidArgumentError (400) or NotFoundError (404), which the app
turns into a plain-text response. Never imports tensorflow.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Callable
from typing import Any

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_gradscope import format as fmt
from tb_gradscope.plugin import export, timeseries, views
from tb_gradscope.plugin.cache import DEFAULT_REFRESH_SECONDS, RunCache, RunData
from tb_gradscope.plugin.encoding import dumps, jsonable
from tb_gradscope.plugin.static import STATIC_DIR, StaticFiles
from tb_gradscope.read.reader import DEFAULT_SAMPLES, Reader
from tb_gradscope.read.runs import RunLogs

_ROUTE_PREFIX = f"/data/plugin/{fmt.PLUGIN_NAME}/"
_MAX_INT = 2**63 - 1


class GradscopePlugin(base_plugin.TBPlugin):
    """Serves the Gradscope tab: runs, matrix, series, FlowGraph, drift,
    events, conflicts, findings and violations of gradscope logs, plus the
    frontend bundle."""

    plugin_name = fmt.PLUGIN_NAME

    def __init__(
        self,
        context: base_plugin.TBContext,
        static_dir: pathlib.Path = STATIC_DIR,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ):
        samples = (context.sampling_hints or {}).get(self.plugin_name, DEFAULT_SAMPLES)
        self._reader = Reader(context.data_provider, downsample=samples)
        self._cache = RunCache(self._reader, refresh_seconds=refresh_seconds)
        self._static = StaticFiles(static_dir)
        # How often TensorBoard reads the logdir (None when not told): the
        # plugin sees nothing newer in between, whatever the tab polls.
        self._reload_interval = getattr(context.flags, "reload_interval", None)

    def get_plugin_apps(self) -> dict[str, Callable]:
        return {
            "/runs": self._runs_route,
            "/status": self._status_route,
            "/run": self._run_route,
            "/matrix": self._matrix_route,
            "/series": self._series_route,
            "/flowgraph": self._flowgraph_route,
            "/drift": self._drift_route,
            "/events": self._events_route,
            "/conflict": self._conflict_route,
            "/findings": self._findings_route,
            "/violations": self._violations_route,
            "/*": self._static_route,
        }

    def is_active(self) -> bool:
        return False  # the data provider's plugin listing decides

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Gradscope")

    # --- plain data -----------------------------------------------------

    def runs_impl(self, ctx, experiment: str) -> dict[str, Any]:
        """Runs with gradscope data, sorted, with their losses and kinds."""
        listings = self._cache.list_runs(ctx, experiment)
        return {
            "runs": [
                {
                    "run": run,
                    "losses": sorted({r.info.name for r in listing.of_kind(fmt.Kind.GRAD_STATS)}),
                    "kinds": listing.kinds,
                    "warnings": listing.warnings,
                }
                for run, listing in sorted(listings.items())
            ]
        }

    def status_impl(self, ctx, experiment: str) -> dict[str, Any]:
        """What the tab polls: each run's latest step and a version that
        changes whenever TensorBoard has loaded anything newer for it (one
        listing, shared with the runs route), and TensorBoard's reload interval."""
        listings = self._cache.list_runs(ctx, experiment)
        return {
            "runs": [
                {"run": run, "last_step": _last_step(listing), "version": _version(listing)}
                for run, listing in sorted(listings.items())
            ],
            "reload_interval": self._reload_interval,
        }

    def run_impl(self, ctx, experiment: str, run: str) -> dict[str, Any]:
        return views.run_info(self._logs(ctx, experiment, run))

    def matrix_impl(self, ctx, experiment: str, run: str, step: int | None) -> dict[str, Any]:
        return views.matrix(self._logs(ctx, experiment, run), step)

    def series_impl(
        self,
        ctx,
        experiment: str,
        run: str,
        kind: str,
        name: str,
        scope: str,
        stat: str,
        points: int,
    ) -> dict[str, Any]:
        return timeseries.series(self._logs(ctx, experiment, run), kind, name, scope, stat, points)

    def flowgraph_impl(self, ctx, experiment: str, run: str) -> dict[str, Any]:
        return views.flowgraph(self._logs(ctx, experiment, run))

    def drift_impl(self, ctx, experiment: str, run: str, points: int) -> dict[str, Any]:
        return timeseries.drift(self._logs(ctx, experiment, run), points)

    def events_impl(self, ctx, experiment: str, run: str) -> dict[str, Any]:
        return views.events(self._logs(ctx, experiment, run))

    def conflict_impl(self, ctx, experiment: str, run: str, points: int) -> dict[str, Any]:
        return timeseries.conflict(self._logs(ctx, experiment, run), points)

    def findings_impl(self, ctx, experiment: str, run: str) -> dict[str, Any]:
        """What `tb-gradscope doctor` finds in the run (the tab's Findings panel)."""
        found = self._data(ctx, experiment, run).findings
        return {"run": run, "findings": [jsonable(f.to_json()) for f in found]}

    def violations_impl(self, ctx, experiment: str, run: str) -> dict[str, Any]:
        """What `tb-gradscope check` reports for the run with no rules file
        (the tab's Violations panel): recorded violations and its recorded
        rules evaluated over its kept steps."""
        checked = self._data(ctx, experiment, run).checked
        return {
            "run": run,
            "rules": [str(r) for r in checked.rules],
            "violations": [jsonable(v.to_json()) for v in checked.violations],
            "warnings": list(checked.warnings),
        }

    def _logs(self, ctx, experiment: str, run: str) -> RunLogs:
        """The run as the cache decoded it, which `tb-gradscope` decodes the same way."""
        return self._data(ctx, experiment, run).logs

    def _data(self, ctx, experiment: str, run: str) -> RunData:
        """The run's cache entry: its decoded logs and what is concluded from them."""
        data = self._cache.get(ctx, experiment, run)
        if data is None:
            raise errors.NotFoundError(
                f"run {run!r} has no gradscope data; the runs route lists those that do"
            )
        return data

    # --- routes ---------------------------------------------------------

    @wrappers.Request.application
    def _runs_route(self, request: wrappers.Request) -> wrappers.Response:
        if _format(request) != "json":
            raise errors.InvalidArgumentError("the runs route only serves format=json")
        ctx, experiment = _context(request)
        return _respond(request, self.runs_impl(ctx, experiment), "json", None, "runs")

    @wrappers.Request.application
    def _status_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        body = dumps(self.status_impl(ctx, experiment))
        etag = hashlib.sha256(body.encode("utf-8")).hexdigest()[:32]
        headers = [("ETag", f'"{etag}"'), ("Cache-Control", "no-cache")]
        if request.if_none_match.contains(etag):
            return http_util.Respond(request, "", "text/plain", code=304, headers=headers)
        return http_util.Respond(request, body, "application/json", headers=headers)

    @wrappers.Request.application
    def _run_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        data = self.run_impl(ctx, experiment, _arg(request, "run"))
        return _respond(request, data, _format(request), export.run_csv, "run")

    @wrappers.Request.application
    def _matrix_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        step = _int_arg(request, "step", None, -_MAX_INT - 1, _MAX_INT)
        data = self.matrix_impl(ctx, experiment, _arg(request, "run"), step)
        return _respond(request, data, _format(request), export.matrix_csv, "matrix")

    @wrappers.Request.application
    def _series_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        data = self.series_impl(
            ctx,
            experiment,
            _arg(request, "run"),
            _arg(request, "kind"),
            _arg(request, "name", default=""),
            _arg(request, "scope"),
            _arg(request, "stat"),
            _points(request),
        )
        return _respond(request, data, _format(request), export.series_csv, "series")

    @wrappers.Request.application
    def _flowgraph_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        data = self.flowgraph_impl(ctx, experiment, _arg(request, "run"))
        return _respond(request, data, _format(request), export.flowgraph_csv, "flowgraph")

    @wrappers.Request.application
    def _drift_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        data = self.drift_impl(ctx, experiment, _arg(request, "run"), _points(request))
        return _respond(request, data, _format(request), export.drift_csv, "drift")

    @wrappers.Request.application
    def _events_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        data = self.events_impl(ctx, experiment, _arg(request, "run"))
        return _respond(request, data, _format(request), export.events_csv, "events")

    @wrappers.Request.application
    def _conflict_route(self, request: wrappers.Request) -> wrappers.Response:
        ctx, experiment = _context(request)
        data = self.conflict_impl(ctx, experiment, _arg(request, "run"), _points(request))
        return _respond(request, data, _format(request), export.conflict_csv, "conflict")

    @wrappers.Request.application
    def _findings_route(self, request: wrappers.Request) -> wrappers.Response:
        return _json_only(request, "findings", self.findings_impl)

    @wrappers.Request.application
    def _violations_route(self, request: wrappers.Request) -> wrappers.Response:
        return _json_only(request, "violations", self.violations_impl)

    @wrappers.Request.application
    def _static_route(self, request: wrappers.Request) -> wrappers.Response:
        _, _, name = request.path.partition(_ROUTE_PREFIX)
        found = self._static.read(name)
        if found is None:
            raise errors.NotFoundError(f"no such gradscope file or route: {name!r}")
        content, content_type = found
        return http_util.Respond(request, content, content_type)


def _last_step(listing) -> int | None:
    """The latest step TensorBoard has loaded of any of the run's records."""
    steps = [r.version[0] for r in listing.records.values() if r.version]
    return max(steps) if steps else None


def _version(listing) -> str:
    """A short digest of every record's listing version and the warnings:
    it changes exactly when the run's data (as TensorBoard has it) do."""
    parts = sorted((tag, repr(r.version), repr(r.info)) for tag, r in listing.records.items())
    text = repr((parts, listing.warnings))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _context(request: wrappers.Request) -> tuple[Any, str]:
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def _arg(request: wrappers.Request, name: str, default: str | None = None) -> str:
    value = request.args.get(name)
    if value is None:
        if default is not None:
            return default
        raise errors.InvalidArgumentError(f"missing query parameter {name!r}")
    return value


def _int_arg(
    request: wrappers.Request, name: str, default: int | None, low: int, high: int
) -> int | None:
    value = request.args.get(name)
    if value is None:
        return default
    try:
        number = int(value.strip(), 10)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"query parameter {name!r} must be an integer, got {value!r}"
        ) from None
    if not low <= number <= high:
        raise errors.InvalidArgumentError(
            f"query parameter {name!r} must be in [{low}, {high}], got {number}"
        )
    return number


def _points(request: wrappers.Request) -> int:
    return _int_arg(request, "points", timeseries.DEFAULT_POINTS, 2, timeseries.MAX_POINTS)


def _format(request: wrappers.Request) -> str:
    value = request.args.get("format", "json")
    if value not in ("json", "csv"):
        raise errors.InvalidArgumentError(f"format must be 'json' or 'csv', got {value!r}")
    return value


def _respond(
    request: wrappers.Request,
    data: dict[str, Any],
    output: str,
    to_csv: Callable[[dict[str, Any]], str] | None,
    route: str,
) -> wrappers.Response:
    if output == "csv" and to_csv is not None:
        return http_util.Respond(
            request,
            to_csv(data),
            "text/csv",
            headers=[("Content-Disposition", f'attachment; filename="gradscope-{route}.csv"')],
        )
    return http_util.Respond(request, dumps(data), "application/json")


def _json_only(request: wrappers.Request, route: str, impl) -> wrappers.Response:
    """A route whose data exist as JSON only (what `doctor` / `check` print)."""
    if _format(request) != "json":
        raise errors.InvalidArgumentError(f"the {route} route only serves format=json")
    ctx, experiment = _context(request)
    return _respond(request, impl(ctx, experiment, _arg(request, "run")), "json", None, route)
