"""The seam to static analysis: the traced step is analyzed once and its FlowGraph written."""

from __future__ import annotations

import linecache
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tb_gradscope.analysis as analysis
from tb_gradscope import format as fmt
from tb_gradscope.record import GradscopeWarning, Recorder
from tests.support.record_fixtures import batch, only, read_records, two_head_model, two_losses


def _setup(tmp_path, every=2):
    model = two_head_model(seed=7)
    opt = keras.optimizers.SGD(0.05)
    opt.build(model.trainable_variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=every, models={"online": model})
    return model, opt, rec


def _tape_step(rec, model, opt):
    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        rec.apply(opt, rec.gradients(tape, losses, model.trainable_variables))

    return step


def test_traced_step_writes_its_flowgraph_once(tmp_path):
    model, opt, rec = _setup(tmp_path)
    step = tf.function(_tape_step(rec, model, opt))
    for s in range(5):
        step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    flowgraphs = records[(fmt.Kind.FLOWGRAPH, "")]
    assert sorted(flowgraphs) == [0]
    (doc,) = flowgraphs[0]
    graph = fmt.FlowGraph.from_json(doc)
    assert tuple(graph.scopes) == records[(fmt.Kind.GRAD_STATS, "a")][0].info.scopes
    assert graph.state("b", "online/trunk") == fmt.BLOCKED  # behind tf.stop_gradient
    assert graph.state("a", "online/trunk") == fmt.UPDATES
    assert graph.state("a", "online/head_b") == fmt.INDEPENDENT
    assert rec.flowgraph == graph


def test_seam_gets_the_traced_graph_losses_and_variable_scopes(tmp_path, monkeypatch):
    calls = []
    real = analysis.analyze_graph

    def spy(graph, losses, variable_scopes, **kwargs):
        calls.append((graph, dict(losses), list(variable_scopes), kwargs))
        return real(graph, losses, variable_scopes, **kwargs)

    monkeypatch.setattr(analysis, "analyze_graph", spy)
    model, opt, rec = _setup(tmp_path)
    step = tf.function(_tape_step(rec, model, opt))
    step(*batch(0))
    step(*batch(1))
    assert len(calls) == 1  # at trace time only
    graph, losses, variable_scopes, kwargs = calls[0]
    assert isinstance(graph, tf.Graph) and graph.building_function
    assert set(losses) == {"a", "b"} and all(t.graph is graph for t in losses.values())
    assert [scope for _, scope in variable_scopes] == list(rec.layout.layout.variable_leaf)
    assert kwargs["scopes"] == list(rec.layout.layout.scopes)
    op_types = {op.type for op in graph.get_operations()}
    assert "AssignSubVariableOp" in op_types or any("Apply" in t for t in op_types)


def test_eager_loop_is_analyzed_with_rec_analyze(tmp_path):
    model, opt, rec = _setup(tmp_path)
    variables = model.trainable_variables

    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            losses = two_losses(model, x, y)
            total = losses["a"] + losses["b"]
        rec.record_gradients(
            {k: list(zip(tape.gradient(loss, variables), variables)) for k, loss in losses.items()},
            losses=losses,
        )
        rec.apply(opt, list(zip(tape.gradient(total, variables), variables)))

    before = [v.numpy() for v in variables]
    graph = rec.analyze(step, *batch(0))
    assert int(rec.step.numpy()) == 0  # tracing ran nothing
    assert all((b == v.numpy()).all() for b, v in zip(before, variables))
    assert graph is not None and graph.state("b", "online/trunk") == fmt.BLOCKED
    for s in range(3):
        step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    assert sorted(records[(fmt.Kind.FLOWGRAPH, "")]) == [0]
    assert sorted(records[(fmt.Kind.GRAD_STATS, "b")]) == [0, 2]


def test_analyze_losses_traces_a_loss_function_from_tensor_specs_and_runs_nothing(tmp_path):
    model, opt, rec = _setup(tmp_path)
    variables = model.trainable_variables
    before = [v.numpy() for v in variables]
    spec = tf.TensorSpec([None, 5])
    graph = rec.analyze_losses(
        lambda x, y: two_losses(model, x, y), opt, variables, spec, tf.TensorSpec([None, 1])
    )
    assert int(rec.step.numpy()) == 0 and int(opt.iterations.numpy()) == 0
    assert all((b == v.numpy()).all() for b, v in zip(before, variables))
    assert graph is not None and graph.state("b", "online/trunk") == fmt.BLOCKED
    assert graph.state("a", "online/trunk") == fmt.UPDATES


def test_analyze_losses_of_an_untraceable_function_only_warns(tmp_path):
    model, opt, rec = _setup(tmp_path)

    def eager_only(x, y):
        return {"a": tf.constant(float(two_losses(model, x, y)["a"].numpy()))}

    with pytest.warns(GradscopeWarning, match="analyze_losses could not trace 'eager_only'"):
        assert rec.analyze_losses(eager_only, opt, model.trainable_variables, *batch(0)) is None


def _actor_critic(leaky: bool = False):
    """A shared-trunk actor-critic of Dense layers and its A2C losses of the
    stacked outputs; the advantage behind tf.stop_gradient unless `leaky`."""
    keras.utils.set_random_seed(11)
    x = keras.Input((4,))
    h = keras.layers.Dense(6, activation="tanh", name="trunk")(x)
    heads = [
        keras.layers.Dense(2, name="policy_head")(h),
        keras.layers.Dense(1, name="value_head")(h),
    ]
    model = keras.Model(x, heads, name="ac")

    def ac_losses(states, actions, returns):
        logits, values = model(states)
        values = values[:, 0]
        advantage = returns - values if leaky else tf.stop_gradient(returns - values)  # the cut
        logp = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
        return {
            "actor": -tf.reduce_mean(logp * advantage),
            "critic": tf.reduce_mean(tf.square(returns - values)),
        }

    return model, ac_losses


def _split(model, actor_takes_all: bool = False):
    """{loss: optimizer}, {loss: variables}: each head with the trunk (or, for
    the actor, every variable of the model)."""
    trunk = model.get_layer("trunk").trainable_variables
    actor = (
        model.trainable_variables
        if actor_takes_all
        else trunk + model.get_layer("policy_head").trainable_variables
    )
    critic = trunk + model.get_layer("value_head").trainable_variables
    opts = {"actor": keras.optimizers.Adam(1e-2), "critic": keras.optimizers.SGD(0.05)}
    return opts, {"actor": actor, "critic": critic}


_SPECS = (tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32), tf.TensorSpec([None]))


def _episode(n: int, size: int = 5):
    rng = np.random.default_rng(200 + n)
    states = tf.constant(rng.normal(size=(size, 4)).astype(np.float32))
    actions = tf.constant(rng.integers(0, 2, size=size).astype(np.int32))
    return states, actions, tf.constant(rng.normal(size=size).astype(np.float32))


def _states(graph):
    return {
        (loss, scope): graph.state(loss, scope)
        for loss in ("actor", "critic")
        for scope in ("ac/trunk", "ac/policy_head", "ac/value_head")
    }


def test_analyze_losses_with_one_optimizer_per_loss_traces_each_losss_own_apply(tmp_path):
    model, ac_losses = _actor_critic()
    opts, split = _split(model)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models={"ac": model})
    before = [v.numpy() for v in model.trainable_variables]
    graph = rec.analyze_losses(ac_losses, opts, split, *_SPECS)
    assert int(rec.step.numpy()) == 0 and all(int(o.iterations.numpy()) == 0 for o in opts.values())
    assert all((b == v.numpy()).all() for b, v in zip(before, model.trainable_variables))
    assert _states(graph) == {
        ("actor", "ac/trunk"): fmt.UPDATES,
        ("actor", "ac/policy_head"): fmt.UPDATES,
        ("actor", "ac/value_head"): fmt.BLOCKED,
        ("critic", "ac/trunk"): fmt.UPDATES,
        ("critic", "ac/policy_head"): fmt.INDEPENDENT,  # no path from the policy head
        ("critic", "ac/value_head"): fmt.UPDATES,
    }
    labels = {info.name: info.optimizer for info in graph.losses}
    assert labels["actor"] and labels["critic"] and labels["actor"] != labels["critic"]
    (edge,) = [e for e in graph.blocked_edges if e.loss == "actor"]
    assert edge.op_type == "StopGradient" and __file__.endswith(edge.source.file)
    assert "# the cut" in linecache.getline(__file__, edge.source.line)


def test_the_eager_two_optimizer_loop_after_analyze_losses_records_both_losses_per_step(tmp_path):
    model, ac_losses = _actor_critic()
    opts, split = _split(model)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models={"ac": model})
    rec.analyze_losses(ac_losses, opts, split, *_SPECS)
    for n in range(2):
        with rec.training_step():
            with rec.tape() as tape:
                losses = ac_losses(*_episode(n))
            for name, opt in opts.items():
                rec.apply(opt, rec.gradients(tape, {name: losses[name]}, split[name]))
    assert int(rec.step.numpy()) == 2
    assert [int(o.iterations.numpy()) for o in opts.values()] == [2, 2]
    rec.close()
    records = only(read_records(str(tmp_path)))
    assert sorted(records[(fmt.Kind.FLOWGRAPH, "")]) == [0]
    assert sorted(records[(fmt.Kind.GRAD_STATS, "actor")]) == [0, 1]
    assert sorted(records[(fmt.Kind.GRAD_STATS, "critic")]) == [0, 1]


@pytest.mark.parametrize(
    "actor_takes_all, state",
    [(False, fmt.IGNORED), (True, fmt.UPDATES)],
    ids=["actor_opt_over_its_head", "actor_opt_over_every_variable"],
)
def test_analyze_losses_of_the_leaky_twin_shows_the_actor_reaching_the_value_head(
    tmp_path, actor_takes_all, state
):
    """Without stop_gradient the actor's gradient reaches the value head: written
    only when the actor's optimizer is handed the value head's variables."""
    model, ac_losses = _actor_critic(leaky=True)
    opts, split = _split(model, actor_takes_all)
    rec = Recorder(logdir=str(tmp_path), models={"ac": model})
    graph = rec.analyze_losses(ac_losses, opts, split, *_SPECS)
    assert graph.state("actor", "ac/value_head") == state
    assert graph.state("critic", "ac/policy_head") == fmt.INDEPENDENT
    assert not [e for e in graph.blocked_edges if e.loss == "actor"]


def _refused(tmp_path, optimizer, variables, losses_fn=None):
    """analyze_losses' ValueError, with what it traced and warned meanwhile."""
    model, ac_losses = _actor_critic()
    calls = []

    def counted(*args):
        calls.append(args)
        return (losses_fn or ac_losses)(*args)

    rec = Recorder(logdir=str(tmp_path), models={"ac": model})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError) as error:
            rec.analyze_losses(counted, optimizer(model), variables(model), *_SPECS)
    assert rec.flowgraph is None
    assert not [w for w in caught if issubclass(w.category, GradscopeWarning)]
    return str(error.value), calls


def test_analyze_losses_refuses_an_optimizer_mapping_without_a_variables_mapping(tmp_path):
    message, calls = _refused(tmp_path, lambda m: _split(m)[0], lambda m: m.trainable_variables)
    assert "optimizer is a mapping (keys ['actor', 'critic']) but variables is not" in message
    assert calls == []  # before tracing


def test_analyze_losses_refuses_a_variables_mapping_without_an_optimizer_mapping(tmp_path):
    message, calls = _refused(tmp_path, lambda m: keras.optimizers.SGD(0.1), lambda m: _split(m)[1])
    assert "variables is a mapping (keys ['actor', 'critic']) but optimizer is not" in message
    assert calls == []


def test_analyze_losses_refuses_mappings_whose_keys_differ(tmp_path):
    def variables(m):
        split = _split(m)[1]
        return {"actor": split["actor"], "value": split["critic"]}

    message, calls = _refused(tmp_path, lambda m: _split(m)[0], variables)
    assert "only in optimizer: ['critic'], only in variables: ['value']" in message
    assert calls == []


def test_analyze_losses_refuses_a_loss_the_mappings_name_and_losses_fn_does_not_return(tmp_path):
    def with_entropy(m):
        opts, split = _split(m)
        return {**opts, "entropy": keras.optimizers.SGD(0.1)}

    def variables(m):
        return {**_split(m)[1], "entropy": m.get_layer("policy_head").trainable_variables}

    message, calls = _refused(tmp_path, with_entropy, variables)
    assert "returned losses ['actor', 'critic']" in message
    assert "missing from the losses: ['entropy']" in message
    assert len(calls) == 1  # found by tracing, raised, not warned


def test_analyze_losses_refuses_a_loss_with_no_optimizer_in_the_mappings(tmp_path):
    def actor_only(m):
        return {"actor": _split(m)[0]["actor"]}

    message, calls = _refused(tmp_path, actor_only, lambda m: {"actor": _split(m)[1]["actor"]})
    assert "with no optimizer: ['critic']" in message


def test_analyze_losses_with_mappings_of_an_untraceable_function_only_warns(tmp_path):
    model, ac_losses = _actor_critic()
    opts, split = _split(model)
    rec = Recorder(logdir=str(tmp_path), models={"ac": model})

    def eager_only(*args):
        return {k: tf.constant(float(v.numpy())) for k, v in ac_losses(*args).items()}

    with pytest.warns(GradscopeWarning, match="analyze_losses could not trace 'eager_only'"):
        assert rec.analyze_losses(eager_only, opts, split, *_episode(0)) is None


def test_failing_analysis_only_warns_and_stats_are_still_recorded(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(analysis, "analyze_graph", broken)
    model, opt, rec = _setup(tmp_path)
    step = tf.function(_tape_step(rec, model, opt))
    with pytest.warns(GradscopeWarning, match="static analysis of the traced step failed"):
        for s in range(3):
            step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    assert (fmt.Kind.FLOWGRAPH, "") not in records
    assert sorted(records[(fmt.Kind.GRAD_STATS, "a")]) == [0, 2]


def test_loop_that_applies_itself_is_analyzed_at_advance(tmp_path):
    model, opt, rec = _setup(tmp_path)
    variables = model.trainable_variables

    @tf.function
    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            losses = two_losses(model, x, y)
            total = losses["a"] + losses["b"]
        rec.record_gradients(
            {k: list(zip(tape.gradient(loss, variables), variables)) for k, loss in losses.items()},
            losses=losses,
        )
        opt.apply_gradients(zip(tape.gradient(total, variables), variables))
        rec.advance()

    for s in range(3):
        step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    (doc,) = records[(fmt.Kind.FLOWGRAPH, "")][0]
    graph = fmt.FlowGraph.from_json(doc)
    assert graph.state("b", "online/trunk") == fmt.BLOCKED
    assert graph.applied is not None and "online/trunk" in graph.applied
