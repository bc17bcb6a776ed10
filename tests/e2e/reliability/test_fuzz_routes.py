"""Every plugin route fuzzed with hypothesis, in-process through TensorBoard's
own WSGI app over real event files (the Python data provider).

Each route gets at least MIN_REQUESTS generated requests: structured
parameters (real names, random unicode, 100 kB strings, negative and huge
steps, traversal strings, NUL) and raw, hand-broken query strings. Whatever
comes in, the answer is never a 5xx and never carries a traceback. The static
route serves a folder seeded with decoys (a secret file next to it, a symlink
out of it, a hidden file, a non-whitelisted extension): a 200 from it must be
byte-for-byte one of the whitelisted files, and a decoy's bytes never come back.

Runs in CI (derandomized, so a failure reproduces); prints one line per route.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import shutil
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.plugin.static import STATIC_DIR, StaticFiles
from tb_gradscope.plugin.timeseries import TABLE_KINDS
from tests.support import plugin_fixtures as pf
from tests.support import providers

PREFIX = "/data/plugin/gradscope/"
ROUTES = (
    "runs",
    "run",
    "matrix",
    "series",
    "flowgraph",
    "drift",
    "events",
    "conflict",
    "findings",
    "violations",
)
STATIC = "static"  # the catch-all "/*" route
MIN_REQUESTS = 500
# Eight requests per example (generating an example costs more than a request): >= 520 per route.
EXAMPLES = int(os.environ.get("GRADSCOPE_FUZZ_EXAMPLES", "65"))
PARAMS = ("run", "step", "kind", "name", "scope", "stat", "points", "format", "experiment", "x")
# A request each route answers with 200; the fuzz also sends it with one parameter broken.
VALID = {
    "runs": {},
    "run": {"run": pf.MAIN_RUN},
    "matrix": {"run": pf.MAIN_RUN, "step": str(pf.MAIN_STEPS[-1])},
    "series": {
        "run": pf.MAIN_RUN,
        "kind": "grad_stats",
        "name": "td",
        "scope": "online",
        "stat": "l2",
    },
    "flowgraph": {"run": pf.MAIN_RUN},
    "drift": {"run": pf.MAIN_RUN},
    "events": {"run": pf.MAIN_RUN},
    "conflict": {"run": pf.MAIN_RUN},
    "findings": {"run": pf.MAIN_RUN},
    "violations": {"run": pf.MAIN_RUN},
}
SECRET = b"GRADSCOPE-SECRET-must-never-be-served\n"

TRAVERSALS = (
    "..%2f..%2fetc/passwd",
    "..%2F..%2F..%2Fetc%2Fpasswd",
    "../../../../etc/passwd",
    "..\\..\\secret.js",
    "%2e%2e/secret.js",
    "%2e%2e%2fsecret.js",
    "..%252fsecret.js",
    "../secret.js",
    "static/../secret.js",
    "./index.js",
    "/index.js",
    "//index.js",
    "index.js%00.png",
    "index.js\x00",
    "%00",
    "link.js",
    "sub/../../secret.js",
    ".hidden.js",
    "evil.py",
    "secret.txt",
    "/etc/passwd",
    "file:///etc/passwd",
    "C:\\Windows\\win.ini",
    "%c0%ae%c0%ae/secret.js",
    "..%c0%afsecret.js",
    "index.js/",
    "INDEX.JS",
)
HOSTILE_TEXT = (
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(1)</script>",
    "javascript:alert(1)",
    "\u202eevil",
    "\x1b[2J\x1b]0;title\x07",
    "line\nbreak\r\n",
    "%s%s%s%n",
    "{}[]\"'\\",
    "nan",
    "Infinity",
    "-0",
    "0x10",
    "1e309",
    "１２",  # full-width digits: int() accepts them
    " 7 ",
    "٣",  # an Arabic-Indic digit
)
# 10 kB values in the fuzz; test_overlong_query_strings sends 1 MB ones (each costs ~0.1 s).
HUGE = ("A" * 10_000, "\u202e\U0001f600<" * 2_500, "9" * 5_000, "-" + "9" * 4_300, "../" * 3_000)
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([-1, 0, 1, 2, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**100]),
)

counts: collections.Counter = collections.Counter()
statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


@pytest.fixture(scope="module")
def static_root(tmp_path_factory) -> pathlib.Path:
    """static/ holding the real bundle, a subfolder and decoys; secrets beside it."""
    root = tmp_path_factory.mktemp("fuzz_static")
    static = root / "static"
    (static / "sub").mkdir(parents=True)
    for path in STATIC_DIR.iterdir():
        if path.is_file():
            shutil.copy(path, static / path.name)
    (static / "sub" / "a.css").write_bytes(b"body{}\n")
    (static / ".hidden.js").write_bytes(SECRET)
    (static / "evil.py").write_bytes(SECRET)
    (root / "secret.js").write_bytes(SECRET)
    (root / "secret.txt").write_bytes(SECRET)
    os.symlink(root / "secret.js", static / "link.js")
    return static


@pytest.fixture(scope="module")
def whitelisted(static_root) -> set[bytes]:
    files = StaticFiles(static_root).names()
    assert {"index.js", "sub/a.css"} <= set(files) and "link.js" not in files
    return {path.read_bytes() for path in files.values()}


@pytest.fixture(scope="module")
def client(tmp_path_factory, static_root) -> werkzeug_test.Client:
    logdir = pf.write_standard_logdir(str(tmp_path_factory.mktemp("fuzz_logs")))
    samples = {fmt.PLUGIN_NAME: 10_000}
    context = base_plugin.TBContext(
        data_provider=providers.python_provider(logdir, samples), sampling_hints=samples
    )
    plugin = GradscopePlugin(context, static_dir=static_root)
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def _value() -> st.SearchStrategy[str]:
    real = [
        pf.MAIN_RUN,
        pf.HOSTILE_RUN,
        "broken",
        "plain",
        *pf.SCOPES,
        *pf.LOSSES,
        pf.PAIR,
        *TABLE_KINDS,
        "l2",
        "max_abs",
        "ratio",
        "drift",
        "cosine",
        "json",
        "csv",
    ]
    return st.one_of(
        st.sampled_from(real),
        st.sampled_from(TRAVERSALS + HOSTILE_TEXT),
        NUMBERS.map(str),
        st.text(max_size=40),
        st.sampled_from(HUGE),
        st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
    )


def _params() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(PARAMS), _value(), max_size=len(PARAMS))


def _raw_query() -> st.SearchStrategy[str]:
    """A query string as a hostile client might send it, not percent-encoded by us."""
    piece = st.one_of(
        st.sampled_from(
            TRAVERSALS + ("%", "%%", "%zz", "%ff%fe", "&&&", "==", "run", "run=", "step=-")
        ),
        st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20),
        st.sampled_from(PARAMS).map(lambda p: p + "="),
        st.sampled_from(HUGE).map(lambda s: "run=" + urllib.parse.quote(s)),  # overlong
    )
    return st.lists(piece, max_size=12).map("".join)


def _check(client, route: str, whitelisted: set[bytes], path: str, **kwargs) -> None:
    response = client.get(path, **kwargs)
    body = response.get_data()
    counts[route] += 1
    statuses[route][response.status_code] += 1
    shown = f"{path[:200]!r} {str(kwargs)[:300]}"
    assert response.status_code < 500, f"{response.status_code} for {shown}: {body[:500]!r}"
    assert b"Traceback" not in body and b'File "' not in body, (
        f"traceback for {shown}: {body[:800]!r}"
    )
    assert SECRET not in body, f"a decoy file was served for {shown}"
    if response.status_code == 200:
        if route == STATIC:
            assert body in whitelisted, f"200 with non-whitelisted bytes for {shown}"
        elif response.mimetype == "application/json":
            json.loads(body)


@pytest.mark.parametrize("route", ROUTES)
@settings(
    deadline=None,
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(params=_params(), raw=_raw_query())
def test_route_never_fails_on_hostile_parameters(client, whitelisted, route, params, raw):
    one_broken = dict(VALID[route])
    one_broken.update(list(params.items())[:1])
    for prefix in ("", "/experiment/x%2fy"):
        path = prefix + PREFIX + route
        _check(client, route, whitelisted, path, query_string=params)
        _check(client, route, whitelisted, path + "?" + raw)
        _check(client, route, whitelisted, path, query_string={**params, "format": "csv"})
        _check(client, route, whitelisted, path, query_string=one_broken)


@settings(
    deadline=None,
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    segments=st.lists(
        st.one_of(
            st.sampled_from(TRAVERSALS),
            st.sampled_from(["index.js", "sub", "a.css", ".."]),
            st.text(max_size=12),
        ),
        min_size=1,
        max_size=6,
    ),
    quote=st.booleans(),
)
def test_static_route_serves_only_whitelisted_bytes(client, whitelisted, segments, quote):
    name = "/".join(segments)
    encoded = (
        urllib.parse.quote(name, safe="") if quote else urllib.parse.quote(name, safe="/%\\:.")
    )
    _check(client, STATIC, whitelisted, PREFIX + encoded)
    _check(
        client, STATIC, whitelisted, PREFIX + encoded, query_string={"format": "csv", "run": name}
    )
    _check(client, STATIC, whitelisted, "/experiment/e" + PREFIX + encoded)
    _check(client, STATIC, whitelisted, PREFIX + "sub/" + encoded)
    _check(client, STATIC, whitelisted, "/experiment/e" + PREFIX + "sub/" + encoded)
    _check(client, STATIC, whitelisted, PREFIX + encoded + "/index.js")
    _check(client, STATIC, whitelisted, PREFIX + "./" + encoded)
    _check(
        client, STATIC, whitelisted, "/experiment/e" + PREFIX + encoded, query_string={"run": name}
    )


def test_static_route_serves_the_bundle_and_nothing_beside_it(client, whitelisted):
    static = StaticFiles(STATIC_DIR)  # the real folder serves its own bundle
    assert static.read("index.js")[0] == (STATIC_DIR / "index.js").read_bytes()
    assert client.get(PREFIX + "index.js").get_data() in whitelisted
    assert client.get(PREFIX + "sub/a.css").get_data() == b"body{}\n"
    for name in ("link.js", ".hidden.js", "evil.py", "..%2fsecret.js", "sub%2f..%2f..%2fsecret.js"):
        response = client.get(PREFIX + name)
        assert response.status_code == 404 and SECRET not in response.get_data(), name


@pytest.mark.parametrize("route", ROUTES + ("index.js",))
def test_overlong_query_strings(client, whitelisted, route):
    path = PREFIX + route
    kind = STATIC if route == "index.js" else route
    for value in ("A" * 1_000_000, "%2e%2e%2f" * 100_000, "\u202e" * 300_000):
        _check(client, kind, whitelisted, path, query_string={**VALID.get(route, {}), "run": value})
        _check(client, kind, whitelisted, path + "?" + "&".join(f"p{i}={i}" for i in range(20_000)))


def test_every_route_got_enough_requests_and_no_failures():
    """Runs after the fuzz tests (file order): the figures for docs/RELIABILITY.md."""
    for route in ROUTES + (STATIC,):
        print(
            f"fuzz {route}: {counts[route]} requests, 0 failures, statuses {dict(statuses[route])}"
        )
    for route in ROUTES + (STATIC,):
        assert counts[route] >= MIN_REQUESTS, f"route {route} got only {counts[route]} requests"
