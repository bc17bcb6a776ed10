"""An eager loop's recorded steps compute their tables (gradients, conflict,
updates) and write their records through functions traced once (op by op they
cost ~2-15 ms of CPU each), with the values a numpy recomputation gives."""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.record import Recorder
from tests.support.record_fixtures import (
    assert_table_close,
    batch,
    dense,
    leaves_of,
    np_grad_table,
    np_update_table,
    read_records,
    two_head_model,
    two_losses,
)

STEPS, EVERY = 9, 2


def test_eager_recorded_steps_use_functions_traced_once_and_record_true_values(tmp_path):
    model = two_head_model()
    opt = keras.optimizers.SGD(0.1)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=EVERY, models={"online": model})
    expected, moved = {}, {}
    for step in range(STEPS):
        x, y = batch(step)
        with tf.GradientTape(persistent=True) as reference:
            reference_losses = two_losses(model, x, y)
        if step % EVERY == 0:
            expected[step] = {
                name: [dense(g) for g in reference.gradient(loss, model.trainable_variables)]
                for name, loss in reference_losses.items()
            }
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        before = [v.numpy() for v in model.trainable_variables]
        rec.apply(opt, rec.gradients(tape, losses, model.trainable_variables))
        if step % EVERY == 0:
            moved[step] = (before, [v.numpy() for v in model.trainable_variables])
    rec.close()

    sink = rec._s.emitter.sink  # noqa: SLF001
    table_fns = list(rec._s.kernels._traced.values())  # noqa: SLF001
    assert sink._compiled and table_fns  # noqa: SLF001
    assert all(
        fn.experimental_get_tracing_count() == 1 for fn in [*sink._compiled.values(), *table_fns]
    )  # noqa: SLF001

    vlayout = rec.layout
    records = next(iter(read_records(str(tmp_path)).values()))
    for name in ("a", "b"):
        written = records[(fmt.Kind.GRAD_STATS, name)]
        assert sorted(written) == list(range(0, STEPS, EVERY))
        for step, grads in expected.items():
            aligned = [None] * len(vlayout.variables)
            for variable, grad in zip(model.trainable_variables, grads[name]):
                aligned[vlayout.index_of(variable)] = grad
            want = np_grad_table(vlayout.layout.scopes, leaves_of(vlayout), aligned)
            assert_table_close(written[step], want, f"{name} at step {step}")
    updates = records[(fmt.Kind.UPDATE_STATS, "")]
    assert sorted(updates) == list(range(0, STEPS, EVERY))
    for step, (before, after) in moved.items():
        order = [
            next(i for i, w in enumerate(model.trainable_variables) if w is v)
            for v in vlayout.variables
        ]
        want = np_update_table(
            vlayout.layout.scopes,
            leaves_of(vlayout),
            [before[i] for i in order],
            [after[i] for i in order],
        )
        assert_table_close(updates[step], want, f"updates at step {step}")
