"""The Gradscope tab's speed in a real Chromium against a real TensorBoard.

One logdir: a DQN demo run recorded by the real Recorder (tb_gradscope.demos,
clean twin) plus a `loss/td` scalar tag in the same run, and the hand-written
500-scope `graph500` run of tests/frontend_logs.py. One `tensorboard` process,
one Chromium (Debian's, never downloaded). Measured:
  - first meaningful render: from navigation to TensorBoard's page until the
    Gradscope tab shows its matrix, against the same for TensorBoard's own
    Scalars tab drawing its line chart (each in a fresh browser context,
    interleaved). Target: ratio of medians <= 1.0 (headline, printed last);
  - layout + render of the 500-scope graph (dagre + SVG, until the next frame),
    unfolded from its readable depth, median in ms;
  - a step-slider update (matrix fetched and redrawn, graph re-highlighted,
    until the next frame), median in ms.
Usage: python -m bench.bench_frontend [--quick]
"""

from __future__ import annotations

import pathlib
import statistics
import tempfile
import time

from bench import harness
from tests import frontend_fixtures as ff
from tests.frontend_logs import graph_spec, write_run
from tests.frontend_tab import ENTRY

DQN_RUN = "dqn/clean"
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


def open_in_tensorboard(browser, url: str, plugin: str):
    """A fresh context's page on TensorBoard at `plugin`'s tab."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
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


def in_page_medians(browser, url: str, repetitions: int, steps: list[int]) -> tuple[float, float]:
    """Medians (ms) of the 500-scope graph unfold and of a step-slider update."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
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


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    # Quick: one first-render sample per tab (each is a whole TensorBoard page
    # load, ~4 s on a loaded 2-core machine) keeps the run under 60 s.
    steps, render_reps, page_reps = (6, 1, 3) if args.quick else (40, 7, 9)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        logdir = pathlib.Path(tmp) / "logs"
        logdir.mkdir()
        log = pathlib.Path(tmp) / "tensorboard.txt"
        process = ff.launch_tensorboard(logdir, log)
        try:
            record(logdir, steps)
            tensorboard = ff.await_tensorboard(process, logdir, log)
            tensorboard.wait_for_runs([DQN_RUN, "graph500"])
            kept = tensorboard.json("run", run=DQN_RUN)["steps"]
            setup = time.perf_counter() - started
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=ff.CHROMIUM, headless=True, args=ff.CHROMIUM_ARGS
                )
                try:
                    graph_ms, slider_ms = in_page_medians(browser, tensorboard.url, page_reps, kept)
                    medians = harness.interleaved_medians(
                        {
                            "scalars": lambda: scalars_first_render(browser, tensorboard.url),
                            "gradscope": lambda: gradscope_first_render(browser, tensorboard.url),
                        },
                        render_reps,
                    )
                finally:
                    browser.close()
        finally:
            ff.stop_tensorboard(process)
    harness.report("kept_steps", len(kept))
    harness.report("graph_500_scopes_layout_render_ms", graph_ms)
    harness.report("step_slider_update_ms", slider_ms)
    harness.report("scalars_first_render_s", medians["scalars"])
    harness.report("gradscope_first_render_s", medians["gradscope"])
    harness.report("setup_seconds", setup)
    harness.report("bench_seconds", time.perf_counter() - started)
    harness.report("first_render_gradscope_over_scalars", medians["gradscope"] / medians["scalars"])


if __name__ == "__main__":
    main()
