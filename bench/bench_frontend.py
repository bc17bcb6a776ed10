"""The Gradscope tab's speed in a real Chromium against a real TensorBoard.

One logdir: a DQN demo run recorded by the real Recorder (tb_gradscope.demos,
clean twin) plus a `loss/td` scalar tag in the same run, and the hand-written
500-scope `graph500` run of tests/support/frontend_logs.py. One `tensorboard` process,
one Chromium (Debian's, never downloaded). Measured:
  - first meaningful render: from navigation to TensorBoard's page until the
    Gradscope tab shows its matrix, against the same for TensorBoard's own
    Scalars tab drawing its line chart (each in a fresh browser context,
    interleaved). Target: ratio of medians <= 1.0 (headline, printed last);
  - layout + render of the 500-scope graph (dagre + SVG, until the next frame),
    unfolded from its readable depth, median in ms;
  - a step-slider update (matrix fetched and redrawn, graph re-highlighted,
    until the next frame), median in ms;
  - switching a fresh tab to the 10,000-scope `wide` run of
    tests/support/frontend_logs.py (target <= 15 s) and unfolding one of its
    second-level scopes (target <= 3 s), medians in s.
Full mode only (each needs minutes of training or a TensorBoard of its own):
  - at ResNet-50 scale (tests/support/frontend_resnet.py, its own TensorBoard): the
    Gradscope matrix's first render against the Scalars tab's charts on the
    same logdir, ratio of medians (target <= 2.0);
  - live with TensorBoard's "Reload data" off and its default
    --reload_interval (5 s): seconds until a new run and a new step show in an
    open tab (target <= 10 s each, what issue 36 promises).
Usage: python -m bench.bench_frontend [--quick]
"""

from __future__ import annotations

import pathlib
import statistics
import tempfile
import time

from bench import harness
from tests.support import frontend_fixtures as ff
from tests.support.frontend_logs import DqnTrainer, graph_spec, wide_spec, write_run
from tests.support.frontend_resnet import RUN as RESNET_RUN
from tests.support.frontend_resnet import train_resnet
from tests.support.frontend_tab import ENTRY, wait_for_plugin_frame

DQN_RUN = "dqn/clean"
WIDE_RUN = "wide"
WIDE_UNFOLDED = "block03/layer07"  # 20 leaves: 520 rows shown become 540
VIEWPORT = {"width": 1280, "height": 900}
RESNET_SCALAR_TAGS = 2  # cls and byol: a raw and a smoothed line each
NEXT_FRAME = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
GRAPH_UNFOLD_MS = f"""async () => {{
  const input = document.querySelector('#gs-graph-depth');
  input.value = '1'; input.dispatchEvent(new Event('change'));
  await {NEXT_FRAME};
  const t0 = performance.now();
  input.value = '2'; input.dispatchEvent(new Event('change'));
  await {NEXT_FRAME};
  if (document.querySelectorAll('.gs-node').length !== 502) throw new Error('graph not unfolded');
  return performance.now() - t0;
}}"""
SLIDER_MS = f"""async ([index, step]) => {{
  const slider = document.querySelector('#gs-step');
  const t0 = performance.now();
  slider.value = String(index); slider.dispatchEvent(new Event('input'));
  while (document.querySelector('#gs-matrix')?.dataset.step !== String(step)) await new Promise(requestAnimationFrame);
  await {NEXT_FRAME};
  return performance.now() - t0;
}}"""


def record(logdir: pathlib.Path, steps: int) -> None:
    """The DQN demo's clean twin, a scalar tag for the Scalars tab, and graph500."""
    import tensorflow as tf

    from tb_gradscope.demos import spec as demo_spec

    run_dir = logdir / DQN_RUN
    demo_spec.load_demo("dqn").train(
        demo_spec.RunSpec(twin="clean", run_dir=str(run_dir), steps=steps)
    )
    writer = tf.summary.create_file_writer(str(run_dir), filename_suffix=".scalars")
    with writer.as_default():
        for step in range(steps):
            tf.summary.scalar("loss/td", 1.0 / (step + 1), step=step)
    writer.close()
    write_run(logdir, graph_spec())
    write_run(logdir, wide_spec())


def open_in_tensorboard(browser, url: str, plugin: str):
    """A fresh context's page on TensorBoard at `plugin`'s tab."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(f"{url}/#{plugin}")
    return context, page


def gradscope_first_render(browser, url: str) -> None:
    context, page = open_in_tensorboard(browser, url, "gradscope")
    try:
        frame = None
        while frame is None:
            frame = next(
                (f for f in page.frames if "plugin_entry.html?name=gradscope" in f.url), None
            )
            if frame is None:
                page.wait_for_timeout(5)
        frame.wait_for_selector("#gs-matrix tbody tr .gs-cell", timeout=60_000)
    finally:
        context.close()


def scalars_first_render(browser, url: str) -> None:
    context, page = open_in_tensorboard(browser, url, "scalars")
    try:
        page.wait_for_selector("vz-line-chart2 path.line[d*='L']", timeout=60_000)
    finally:
        context.close()


def wide_run_seconds(browser, url: str) -> tuple[float, float]:
    """Seconds to switch a fresh tab to the 10,000-scope run (its two top levels
    drawn), then to unfold one second-level scope (its 20 leaves drawn)."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(url + ENTRY)
        page.wait_for_selector("#gs-matrix tbody tr")
        started = time.perf_counter()
        page.select_option("#gs-run", value=WIDE_RUN)
        page.wait_for_function(
            "run => document.querySelector('#gs-matrix')?.dataset.run === run", arg=WIDE_RUN
        )
        switched = time.perf_counter() - started
        if page.locator("#gs-matrix tbody tr").count() != 520:
            raise RuntimeError("the wide run did not open folded to its two top levels")
        started = time.perf_counter()
        page.locator(f'tr[data-scope="{WIDE_UNFOLDED}"] button.gs-scope').click()
        page.wait_for_function(
            "() => document.querySelectorAll('#gs-matrix tbody tr').length === 540"
        )
        return switched, time.perf_counter() - started
    finally:
        context.close()


def in_page_medians(browser, url: str, repetitions: int, steps: list[int]) -> tuple[float, float]:
    """Medians (ms) of the 500-scope graph unfold and of a step-slider update."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(url + ENTRY)
        page.wait_for_selector("#gs-matrix tbody tr")
        page.select_option("#gs-run", value="graph500")
        page.wait_for_selector('#gs-graph-svg[data-depth="1"]')
        graph = [page.evaluate(GRAPH_UNFOLD_MS) for _ in range(repetitions)]
        page.select_option("#gs-run", value=DQN_RUN)
        page.wait_for_function(
            "run => document.querySelector('#gs-matrix')?.dataset.run === run", arg=DQN_RUN
        )
        page.wait_for_selector("#gs-graph-svg")
        slider = []
        for i in range(2 * repetitions):
            index = 0 if i % 2 == 0 else len(steps) - 1
            slider.append(page.evaluate(SLIDER_MS, [index, steps[index]]))
        return statistics.median(graph), statistics.median(slider)
    finally:
        context.close()


def resnet_matrix_drawn(browser, url: str) -> None:
    """A fresh context's Gradscope tab until the ResNet-50 run's matrix is drawn."""
    context, page = open_in_tensorboard(browser, url, "gradscope")
    try:
        frame = wait_for_plugin_frame(page)
        frame.wait_for_selector("#gs-matrix tbody tr", timeout=60_000)
        if frame.locator("#gs-matrix").get_attribute("data-run") != RESNET_RUN:
            raise RuntimeError(f"the tab opened on another run than {RESNET_RUN}")
    finally:
        context.close()


def resnet_scalars_drawn(browser, url: str) -> None:
    """A fresh context's Scalars tab until every line of the ResNet run's charts is drawn."""
    context, page = open_in_tensorboard(browser, url, "scalars")
    try:
        page.locator("tf-scalar-card path.line[d*='L']").nth(2 * RESNET_SCALAR_TAGS - 1).wait_for(
            timeout=60_000
        )
    finally:
        context.close()


def resnet_first_render(browser, tmp: pathlib.Path, repetitions: int) -> dict[str, float]:
    """At ResNet-50 scale, on a TensorBoard of its own: the matrix's cold first
    render (the plugin reads the run for the first time), then the medians of
    the matrix's and the Scalars tab's first renders, interleaved."""
    logdir = tmp / "resnet_logs"
    train_resnet(logdir)
    tensorboard = ff.start_tensorboard(logdir, tmp / "tensorboard_resnet.txt")
    try:
        tensorboard.wait_for_runs([RESNET_RUN], timeout=120)
        tensorboard.wait_until_loaded([RESNET_RUN])
        started = time.perf_counter()
        resnet_matrix_drawn(browser, tensorboard.url)
        cold = time.perf_counter() - started
        medians = harness.interleaved_medians(
            {
                "scalars": lambda: resnet_scalars_drawn(browser, tensorboard.url),
                "gradscope": lambda: resnet_matrix_drawn(browser, tensorboard.url),
            },
            repetitions,
        )
    finally:
        ff.stop_tensorboard(tensorboard.process)
    return {"cold": cold, **medians}


def live_seconds(browser, tmp: pathlib.Path) -> tuple[float, float]:
    """Seconds until an open tab shows a new run, then a new step, with
    TensorBoard's "Reload data" off and its default --reload_interval."""
    logdir = tmp / "live_logs"
    first = DqnTrainer(logdir / "first")
    first.train(11)  # steps 0 and 10 recorded
    tensorboard = ff.start_tensorboard(logdir, tmp / "tensorboard_live.txt", reload_interval=None)
    context = None
    try:
        tensorboard.wait_for_steps("first", 2)
        context, page = open_in_tensorboard(browser, tensorboard.url, "gradscope")
        frame = wait_for_plugin_frame(page)
        frame.wait_for_selector('#gs-matrix[data-run="first"]', timeout=30_000)
        frame.wait_for_selector('#gradscope[data-host="tensorboard"]', timeout=15_000)
        second = DqnTrainer(logdir / "second", seed=1)
        try:
            second.train(1)  # its first record, flushed
            started = time.perf_counter()
            frame.wait_for_function(
                "() => !!document.querySelector('#gs-run option[value=\"second\"]')",
                timeout=60_000,
                polling=100,
            )
            new_run = time.perf_counter() - started
        finally:
            second.recorder.close()
        first.train(10)  # step 20 recorded, flushed
        started = time.perf_counter()
        frame.wait_for_function(
            "() => document.querySelector('output.gs-step-label')?.textContent === '20 (latest)'",
            timeout=60_000,
            polling=100,
        )
        return new_run, time.perf_counter() - started
    finally:
        if context is not None:
            context.close()
        first.recorder.close()
        ff.stop_tensorboard(tensorboard.process)


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    # Quick: one first-render sample per tab (each is a whole TensorBoard page
    # load, ~4 s on a loaded 2-core machine) keeps the run under 60 s.
    steps, render_reps, page_reps, wide_reps = (6, 1, 3, 1) if args.quick else (40, 7, 9, 5)
    started = time.perf_counter()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        tmp = pathlib.Path(tmp)
        logdir = tmp / "logs"
        logdir.mkdir()
        log = tmp / "tensorboard.txt"
        process = ff.launch_tensorboard(logdir, log)
        browser = None
        try:
            record(logdir, steps)
            tensorboard = ff.await_tensorboard(process, logdir, log)
            tensorboard.wait_for_runs([DQN_RUN, "graph500", WIDE_RUN])
            kept = tensorboard.json("run", run=DQN_RUN)["steps"]
            setup = time.perf_counter() - started
            browser = playwright.chromium.launch(
                executable_path=ff.CHROMIUM, headless=True, args=ff.CHROMIUM_ARGS
            )
            graph_ms, slider_ms = in_page_medians(browser, tensorboard.url, page_reps, kept)
            wide = [wide_run_seconds(browser, tensorboard.url) for _ in range(wide_reps)]
            medians = harness.interleaved_medians(
                {
                    "scalars": lambda: scalars_first_render(browser, tensorboard.url),
                    "gradscope": lambda: gradscope_first_render(browser, tensorboard.url),
                },
                render_reps,
            )
            ff.stop_tensorboard(process)
            if not args.quick:
                resnet = resnet_first_render(browser, tmp, render_reps)
                live = live_seconds(browser, tmp)
        finally:
            if browser is not None:
                browser.close()
            ff.stop_tensorboard(process)
    harness.report("kept_steps", len(kept))
    harness.report("graph_500_scopes_layout_render_ms", graph_ms)
    harness.report("step_slider_update_ms", slider_ms)
    harness.report("wide_10k_scopes_switch_s", statistics.median(s for s, _ in wide))
    harness.report("wide_10k_scopes_unfold_s", statistics.median(u for _, u in wide))
    if not args.quick:
        harness.report("resnet50_gradscope_cold_first_render_s", resnet["cold"])
        harness.report("resnet50_scalars_first_render_s", resnet["scalars"])
        harness.report("resnet50_gradscope_first_render_s", resnet["gradscope"])
        harness.report(
            "resnet50_first_render_gradscope_over_scalars", resnet["gradscope"] / resnet["scalars"]
        )
        harness.report("live_new_run_shown_s", live[0])
        harness.report("live_new_step_shown_s", live[1])
    harness.report("scalars_first_render_s", medians["scalars"])
    harness.report("gradscope_first_render_s", medians["gradscope"])
    harness.report("setup_seconds", setup)
    harness.report("bench_seconds", time.perf_counter() - started)
    harness.report("first_render_gradscope_over_scalars", medians["gradscope"] / medians["scalars"])


if __name__ == "__main__":
    main()
