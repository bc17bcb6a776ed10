"""Static flow analysis time against TF's own tracing time for the same step.

The step is an MLP training step (forward, tape.gradient, SGD apply, a
stop_gradient branch) sized to ~1k / 10k / 50k graph ops. Each repetition
traces a fresh tf.function (the baseline) and then analyses that graph,
interleaved; the figures are medians. `analysis_to_trace_ratio_<size>` is
median analysis time / median trace time (target <= 0.05); `us_per_op_<size>`
shows linearity in ops. Full mode adds 50k ops and a Keras ResNet-50 step.

    python bench/bench_analysis.py --quick   # < 60 s
    python bench/bench_analysis.py           # full
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tb_gradscope.analysis import analyze_graph  # noqa: E402

WIDTH = 8


def mlp_step(layers: int):
    """A training step of `layers` dense layers; returns (tf.function factory, scopes)."""
    rng = np.random.default_rng(0)
    kernels = [
        tf.Variable(rng.normal(size=(WIDTH, WIDTH)).astype("float32") * 0.3) for _ in range(layers)
    ]
    biases = [tf.Variable(np.zeros(WIDTH, "float32")) for _ in range(layers)]
    variables = kernels + biases
    scopes = [(v, f"net/block_{i // 10}/layer_{i}") for i, v in enumerate(kernels)]
    scopes += [(v, f"net/block_{i // 10}/layer_{i}") for i, v in enumerate(biases)]

    def step(x):
        with tf.GradientTape() as tape:
            h = x
            for i, (k, b) in enumerate(zip(kernels, biases)):
                h = tf.tanh(h @ k + b)
                if i == layers // 2:
                    side = tf.stop_gradient(h)
            loss = tf.reduce_mean(h * h) + tf.reduce_mean(side)
        grads = tape.gradient(loss, variables)
        for v, g in zip(variables, grads):
            v.assign_sub(0.01 * g)
        return {"loss": loss}

    return step, scopes, tf.TensorSpec([4, WIDTH])


def resnet_step():
    import keras

    model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    opt = keras.optimizers.SGD(0.01)
    opt.build(model.trainable_variables)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(y, model(x, training=True))
            )
        opt.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        return {"loss": loss}

    scopes = [(v, v.path.rpartition("/")[0] or v.path) for v in model.variables]
    return step, scopes, (tf.TensorSpec([2, 64, 64, 3]), tf.TensorSpec([2], tf.int32))


def measure(step, scopes, specs, reps: int):
    specs = specs if isinstance(specs, tuple) else (specs,)
    traces, analyses, ops = [], [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        concrete = tf.function(step).get_concrete_function(*specs)
        t1 = time.perf_counter()
        analyze_graph(concrete.graph, {"loss": concrete.structured_outputs["loss"]}, scopes)
        t2 = time.perf_counter()
        traces.append(t1 - t0)
        analyses.append(t2 - t1)
        ops = len(concrete.graph.get_operations())
    return statistics.median(traces), statistics.median(analyses), ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k ops only (< 60 s)")
    args = parser.parse_args()
    sizes = {"1k": (1_000, 3), "10k": (10_000, 3)}
    if not args.quick:
        sizes = {"1k": (1_000, 7), "10k": (10_000, 5), "50k": (50_000, 3)}
    per_layer = 20.0  # graph ops per layer; re-estimated from each measured size
    results = {}
    for label, (target, reps) in sizes.items():
        layers = max(2, round(target / per_layer))
        step, scopes, spec = mlp_step(layers)
        trace, analysis, ops = measure(step, scopes, spec, reps)
        results[label] = (trace, analysis, ops)
        per_layer = ops / layers
        print(f"ops_{label}: {ops}")
        print(f"trace_s_{label}: {trace:.3f}")
        print(f"analysis_s_{label}: {analysis:.3f}")
        print(f"us_per_op_{label}: {1e6 * analysis / ops:.2f}")
        print(f"analysis_to_trace_ratio_{label}: {analysis / trace:.4f}")
    largest = list(results)[-1]
    print(
        f"linearity_{largest}_vs_1k: "
        f"{(results[largest][1] / results[largest][2]) / (results['1k'][1] / results['1k'][2]):.2f}"
    )
    if not args.quick:
        step, scopes, specs = resnet_step()
        trace, analysis, ops = measure(step, scopes, specs, 3)
        print(f"ops_resnet50: {ops}")
        print(f"analysis_to_trace_ratio_resnet50: {analysis / trace:.4f}")
    trace, analysis, _ = results["10k"]
    print(f"analysis_to_trace_ratio_10k: {analysis / trace:.4f}")


if __name__ == "__main__":
    main()
