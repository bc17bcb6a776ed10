"""Every number the tab shows equals the plugin route's value, within the
display's rounding: for every run of the committed demo_logs/, the matrix
cells, the ‖Δθ‖ and ‖Δθ‖/‖θ‖ columns, the step's ‖g‖ span under the colour
legend, the details panel of every cell and the "last" value of every drift and
conflict legend; and one colour scale serves every run (a larger ‖g‖ is never
lighter, whichever runs the two cells are in).

Compact numbers (cells, columns, legends) promise two significant digits, the
details panel six. A value that rounds to 40 once showed as "4".
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.support.frontend_fixtures import TensorBoard, demo_log_runs
from tests.support.frontend_logs import COMPACT_SHOWN, numbers_spec
from tests.support.frontend_tab import ENTRY, OpenTab, watch

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser

COMPACT_DIGITS = 2
FULL_DIGITS = 6
# The details panel's numeric fields and where the route keeps each value.
CELL_FIELDS = {
    "variables with gradient": "grad_vars",
    "‖g‖ (L2)": "l2",
    "max |g|": "max_abs",
    "non-finite elements": "nonfinite",
    "zero fraction": "zero_frac",
}
UPDATE_FIELDS = {"‖Δθ‖ applied": "update_norm", "‖θ‖": "weight_norm", "‖Δθ‖/‖θ‖": "ratio"}

# Unfolds every scope, then reads every shown number; clicking each cell
# (a synchronous redraw) fills the details panel.
READ_MATRIX = """() => {
  for (let i = 0; i < 10000; i++) {
    const folded = document.querySelector('#gs-matrix button.gs-scope[aria-expanded="false"]');
    if (folded === null) break;
    folded.click();
  }
  const cells = [...document.querySelectorAll('#gs-matrix .gs-cell')].map(
    (b) => ({ loss: b.dataset.loss, scope: b.dataset.scope, state: b.dataset.state, text: b.textContent,
              shade: getComputedStyle(b).backgroundColor }));
  const rows = [...document.querySelectorAll('#gs-matrix tbody tr')].map((tr) => ({
    scope: tr.dataset.scope,
    update_norm: tr.querySelector('td[data-column="update_norm"]').textContent,
    ratio: tr.querySelector('td[data-column="ratio"]').textContent,
  }));
  const ramp = [...document.querySelectorAll('#gs-ramp-span span')].map((s) => s.textContent);
  const details = cells.map((c) => {
    const selector = `.gs-cell[data-loss="${CSS.escape(c.loss)}"][data-scope="${CSS.escape(c.scope)}"]`;
    const cell = document.querySelector(selector);
    if (cell === null) return { loss: c.loss, scope: c.scope, fields: null };
    cell.click();
    const fields = [...document.querySelectorAll('#gs-details dd[data-field]')];
    return { loss: c.loss, scope: c.scope, fields: Object.fromEntries(fields.map((d) => [d.dataset.field, d.textContent])) };
  });
  return { step: Number(document.querySelector('#gs-matrix').dataset.step), cells, rows, ramp, details };
}"""

READ_LEGENDS = """(section) => [...document.querySelectorAll(`#${section} .gs-chart`)].map((chart) => ({
  pair: chart.dataset.pair,
  items: [...chart.querySelectorAll('.gs-chart-legend li')].map((li) => ({
    label: li.dataset.label, text: li.querySelector('.gs-muted').textContent.trim(),
  })),
}))"""


def wire(value: Any) -> float | None:
    """A route's number: NaN/Inf arrive as strings, missing as null."""
    if value is None:
        return None
    return float(value)  # float("NaN"), float("Infinity") and float("-Infinity") all parse


def shows(shown: str, value: float | None, digits: int, none: str) -> bool:
    """Whether `shown` is `value` rounded to `digits` significant digits (NaN, ±Inf and
    missing values spelled out)."""
    if value is None:
        return shown == none
    if math.isnan(value):
        return shown == "NaN"
    if math.isinf(value):
        return shown.startswith("+Inf" if value > 0 else "-Inf")
    try:
        number = float(shown)
    except ValueError:
        return False
    if value == 0:
        return number == 0
    if float(value).is_integer() and digits == FULL_DIGITS:
        return number == value
    half_unit = 0.5 * 10 ** (math.floor(math.log10(abs(value))) - digits + 1)
    return abs(number - value) <= half_unit * (1 + 1e-9)


def compact(shown: str, value: float | None) -> bool:
    return shows(shown, value, COMPACT_DIGITS, "–")


def full(shown: str, value: float | None) -> bool:
    return shows(shown, value, FULL_DIGITS, "none")


def matrix_mismatches(run: str, seen: dict, matrix: dict) -> list[str]:
    """Every shown number of the matrix, its legend and details that is not the route's."""
    bad: list[str] = []
    cells, updates = matrix["cells"], matrix["updates"]
    for cell in seen["cells"]:
        served = cells[cell["loss"]][cell["scope"]]
        assert cell["state"] == served["state"], (run, cell)
        if cell["state"] == "updates" and not compact(cell["text"], wire(served["l2"])):
            bad.append(
                f"{run}: cell {cell['loss']} × {cell['scope']} shows {cell['text']!r}, l2 is {served['l2']}"
            )
    for row in seen["rows"]:
        update = updates.get(row["scope"], {})
        for column in ("update_norm", "ratio"):
            if not compact(row[column], wire(update.get(column))):
                bad.append(
                    f"{run}: {column} of {row['scope']} shows {row[column]!r}, route {update.get(column)}"
                )
    norms = [
        wire(c["l2"]) for row in cells.values() for c in row.values() if c["state"] == "updates"
    ]
    norms = [n for n in norms if n is not None and n > 0 and math.isfinite(n)]
    bounds = (min(norms), max(norms)) if norms else (None, None)
    assert len(seen["ramp"]) == 2, seen["ramp"]
    for shown, value in zip(seen["ramp"], bounds):
        if not compact(shown, value):
            bad.append(f"{run}: legend's step span shows {shown!r}, the route's is {value}")
    for detail in seen["details"]:
        assert detail["fields"] is not None, (
            f"{run}: the matrix lost cell {detail['loss']} × {detail['scope']}"
        )
        served = cells[detail["loss"]][detail["scope"]]
        update = updates.get(detail["scope"], {})
        where = f"{run}: details of {detail['loss']} × {detail['scope']}"
        for field, key in CELL_FIELDS.items():
            value = served[key] if key == "grad_vars" else wire(served[key])
            if not full(detail["fields"][field], value):
                bad.append(
                    f"{where}: {field} shows {detail['fields'][field]!r}, route {served[key]}"
                )
        for field, key in UPDATE_FIELDS.items():
            if not full(detail["fields"][field], wire(update.get(key))):
                bad.append(
                    f"{where}: {field} shows {detail['fields'][field]!r}, route {update.get(key)}"
                )
    return bad


def last_value(values: list) -> float | None:
    finite = [
        wire(v) for v in values if v is not None and wire(v) is not None and math.isfinite(wire(v))
    ]
    return finite[-1] if finite else None


def legend_mismatches(run: str, charts: list[dict], pairs: list[dict], column: str) -> list[str]:
    """The "last" value of every chart legend against the route's last finite value."""
    bad: list[str] = []
    by_name = {pair["name"]: pair for pair in pairs}
    assert sorted(c["pair"] for c in charts) == sorted(by_name), (run, column)
    for chart in charts:
        pair = by_name[chart["pair"]]
        series = pair["values"]["drift"] if column == "drift" else pair["cosine"]
        for item in chart["items"]:
            value = last_value(series[item["label"]])
            shown = item["text"].removeprefix("last ")
            # A series with no value says so in words, never "last <number>".
            right = not item["text"].startswith("last ") if value is None else compact(shown, value)
            if not right:
                bad.append(
                    f"{run}: {column} legend of {chart['pair']} / {item['label']} shows {item['text']!r}, "
                    f"the route's last value is {value}"
                )
    return bad


def lightness(rgb: str) -> float:
    """The HSL lightness (0-1) of a computed `rgb(r, g, b)` colour."""
    channels = [int(part) / 255 for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    return (max(channels) + min(channels)) / 2


def scale_mismatches(shades: list[tuple[float, float, str]]) -> list[str]:
    """Pairs of updating cells (from any runs) where the larger ‖g‖ has the lighter
    shade (by more than rounding to 8-bit channels): a per-run scale does that."""
    bad: list[str] = []
    ordered = sorted(
        (s for s in shades if s[0] is not None and math.isfinite(s[0]) and s[0] > 0),
        key=lambda s: s[0],
    )
    darkest = None
    for l2, light, where in ordered:
        if darkest is not None and light > darkest[1] + 2.5 / 255:
            bad.append(
                f"{where} (‖g‖ {l2:.3g}) is lighter than {darkest[2]} (‖g‖ {darkest[0]:.3g})"
            )
        if darkest is None or light < darkest[1]:
            darkest = (l2, light, where)
    assert len(ordered) > 20, len(ordered)
    return bad


def open_run(page: Page, run: str) -> None:
    page.locator("#gs-run").select_option(value=run)
    page.wait_for_function(
        "run => document.querySelector('#gs-matrix')?.dataset.run === run", arg=run
    )
    page.locator("#gs-drift").wait_for()


@pytest.mark.slow  # a TensorBoard of its own, 23 runs
def test_every_shown_number_equals_the_routes_value_on_every_demo_run(
    browser: Browser, demo_logs_tensorboard: TensorBoard
) -> None:
    tb = demo_logs_tensorboard
    runs = demo_log_runs()
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        problems = watch(page)
        page.goto(tb.url + ENTRY)
        page.wait_for_selector("#gs-matrix tbody tr", timeout=30_000)
        mismatches: list[str] = []
        checked = 0
        shades: list[tuple[float, float, str]] = []  # (l2, lightness, where) of every updating cell
        for run in runs:
            open_run(page, run)
            seen = page.evaluate(READ_MATRIX)
            matrix = tb.json("matrix", run=run, step=str(seen["step"]))
            assert len(seen["rows"]) == len(matrix["scopes"]), (
                f"{run}: not every scope was unfolded"
            )
            mismatches += matrix_mismatches(run, seen, matrix)
            shades += [
                (
                    wire(matrix["cells"][c["loss"]][c["scope"]]["l2"]),
                    lightness(c["shade"]),
                    f"{run}: {c['loss']} × {c['scope']}",
                )
                for c in seen["cells"]
                if c["state"] == "updates"
            ]
            mismatches += legend_mismatches(
                run,
                page.evaluate(READ_LEGENDS, "gs-drift"),
                tb.json("drift", run=run)["pairs"],
                "drift",
            )
            mismatches += legend_mismatches(
                run,
                page.evaluate(READ_LEGENDS, "gs-conflict"),
                tb.json("conflict", run=run)["pairs"],
                "cosine",
            )
            checked += len(seen["cells"]) * (1 + len(CELL_FIELDS) + len(UPDATE_FIELDS)) + 2 * len(
                seen["rows"]
            )
        assert checked > 500, checked
        mismatches += scale_mismatches(shades)
        assert mismatches == [], (
            f"{len(mismatches)} of about {checked} shown numbers differ:\n" + "\n".join(mismatches)
        )
        assert problems == [], problems
    finally:
        context.close()


def test_compact_numbers_keep_integer_zeros_and_whole_exponents(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    spec = numbers_spec()
    matrix = tensorboard.json("matrix", run=spec.name)
    tab = open_tab(run=spec.name)
    for scope, (value, shown) in zip(spec.scopes[1:], COMPACT_SHOWN.items()):
        served = matrix["cells"]["fit"][scope]["l2"]
        assert served == pytest.approx(value, rel=1e-6), scope  # float32 on the wire
        assert tab.cell("fit", scope).text_content() == shown, (value, served)
        assert tab.row(scope).locator('td[data-column="update_norm"]').text_content() == shown, (
            value
        )
        assert compact(shown, served), (shown, served)  # the rule the demo-log test applies
    ramp = tab.frame.locator("#gs-ramp-span span").all_text_contents()
    assert ramp == [COMPACT_SHOWN[min(COMPACT_SHOWN)], COMPACT_SHOWN[max(COMPACT_SHOWN)]]
    tab.assert_clean()
