"""Property: on generated models, "has gradient" in the log <=> tape.gradient is not None.

Models are chains of tanh layers whose weights carry random scope names and
depths; stop_gradient is placed at random between layers, and some weights are
left unused. Each weight gets its own leaf scope, so the leaf row's grad_vars
says whether that weight got a gradient; every row must match numpy.
"""

from __future__ import annotations

import tempfile

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tb_gradscope import format as fmt
from tb_gradscope.record import Recorder
from tb_gradscope.scopes import leaf_scope
from tests.support.record_fixtures import dense, np_grad_table, only, read_records

WIDTH = 3
_token = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)


@st.composite
def models(draw):
    n = draw(st.integers(2, 6))
    paths = draw(st.lists(st.lists(_token, min_size=1, max_size=4), min_size=n, max_size=n))
    # A unique leaf per weight: its parent path plus its index.
    names = ["/".join(p + [f"w{i}", "kernel"]) for i, p in enumerate(paths)]
    used = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    stops = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    tap = draw(st.integers(0, n - 1))  # the second loss reads the chain here
    seed = draw(st.integers(0, 2**16))
    way = draw(st.sampled_from(["tape", "computed"]))
    return names, used, stops, tap, seed, way


def _forward(variables, used, stops, tap, x):
    h, tapped = x, None
    for i, (v, use, stop) in enumerate(zip(variables, used, stops)):
        if use:
            h = tf.tanh(h @ v)
        if stop:
            h = tf.stop_gradient(h)
        if i == tap:
            tapped = h
    return {"main": tf.reduce_mean(h**2), "side": tf.reduce_sum(tapped) * 0.5}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models())
def test_has_gradient_iff_tape_gradient_is_not_none(model):
    names, used, stops, tap, seed, way = model
    rng = np.random.default_rng(seed)
    variables = [
        tf.Variable(rng.normal(size=(WIDTH, WIDTH)).astype(np.float32), name=name) for name in names
    ]
    x = tf.constant(rng.normal(size=(4, WIDTH)).astype(np.float32))
    with tempfile.TemporaryDirectory() as logdir:
        rec = Recorder(logdir=logdir, every_n_steps=1, variables=variables)
        with rec.tape() as tape:
            losses = _forward(variables, used, stops, tap, x)
        expected = {k: tape.gradient(loss, variables) for k, loss in losses.items()}
        if way == "tape":
            rec.gradients(tape, losses, variables)
        else:
            rec.record_gradients({k: list(zip(g, variables)) for k, g in expected.items()})
        rec.close()
        records = only(read_records(logdir))
    leaves = [leaf_scope(n) for n in names]
    for loss, grads in expected.items():
        table = records[(fmt.Kind.GRAD_STATS, loss)][0]
        for leaf, grad in zip(leaves, grads):
            assert (table.row(leaf)["grad_vars"] == 1) == (grad is not None), (loss, leaf)
        reference = np_grad_table(table.info.scopes, leaves, [dense(g) for g in grads])
        np.testing.assert_allclose(table.values, reference, rtol=1e-5, atol=1e-6)
