"""The two ways a TF1 training loop drives a GraphRecorder.

`RecordingSession` wraps a plain `tf.compat.v1.Session`; `GradscopeHook` plugs
into `MonitoredTrainingSession(hooks=[...])`. Both add the recorder's fetches
to the user's own run call and hand the results back to the recorder.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.integrations.tf1._graph import replace_ops
from tb_gradscope.rules.policy import FlowRuleViolation


class RecordingSession(private.SessionInterface):
    """A session whose `run()` also records gradient flow; see GraphRecorder.wrap.

    It is a `SessionInterface`, so `Saver.save(sess, ...)` accepts it. Only
    `run()` records (`make_callable`, `partial_run` and `Tensor.eval()` pass
    through unrecorded). `close()` closes the recorder's update window and event
    file, then the session.
    """

    def __init__(self, session: Any, recorder: Any):
        self._session = session
        self._recorder = recorder

    def run(
        self, fetches: Any, feed_dict: Any = None, options: Any = None, run_metadata: Any = None
    ) -> Any:
        """`Session.run`, plus the recorder's fetches at recorded steps."""
        run = self._session.run
        pending = self._recorder._before(run, fetches, feed_dict)
        if pending is None or not pending.fetches:
            result = run(fetches, feed_dict, options, run_metadata)
            if pending is not None:
                self._recorder._after(run, pending, {})
            return result
        names = list(pending.fetches)
        try:  # a list, not a dict: Session.run handles nested dicts slowly (~0.1 ms)
            result, extra = run(
                (fetches, [pending.fetches[n] for n in names]), feed_dict, options, run_metadata
            )
        except tf.errors.OpError as e:
            if not self._recorder._owns(e):
                raise
            replacement = self._recorder._recover(run, pending, e)
            if replacement is not None:
                fetches = replace_ops(self.graph, fetches, pending.called, replacement)
            return run(fetches, feed_dict, options, run_metadata)
        self._recorder._after(run, pending, dict(zip(names, extra)))
        return result

    @property
    def graph(self) -> tf.Graph:
        return self._session.graph

    @property
    def sess_str(self) -> str:
        return self._session.sess_str

    def partial_run_setup(self, fetches: Any, feeds: Any = None) -> Any:
        return self._session.partial_run_setup(fetches, feeds)

    def partial_run(self, handle: Any, fetches: Any, feed_dict: Any = None) -> Any:
        return self._session.partial_run(handle, fetches, feed_dict)

    def close(self) -> None:
        try:
            self._recorder.close(self._session)
        finally:
            self._session.close()

    def __enter__(self) -> RecordingSession:
        self._session.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        try:
            self._recorder.close(self._session)
        except FlowRuleViolation:
            if exc[0] is None:  # an error already leaving the block is the one to see
                self._session.__exit__(*exc)
                raise
        return self._session.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class GradscopeHook(tf.compat.v1.train.SessionRunHook):
    """A SessionRunHook that records into a GraphRecorder; see GraphRecorder.hook.

    A failure inside gradscope's own ops cannot be retried from a hook, so the
    recorder only fetches what the call already feeds (it checks placeholders
    before adding a fetch).
    """

    def __init__(self, recorder: Any):
        self._recorder = recorder
        self._pending = None

    def before_run(self, run_context: Any) -> Any:
        args = run_context.original_args
        self._pending = self._recorder._before(
            run_context.session.run, args.fetches, args.feed_dict
        )
        if self._pending is None:
            return None
        return tf.compat.v1.train.SessionRunArgs(list(self._pending.fetches.values()))

    def after_run(self, run_context: Any, run_values: Any) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            results = dict(zip(pending.fetches, run_values.results or ()))
            self._recorder._after(run_context.session.run, pending, results)

    def end(self, session: Any) -> None:
        self._recorder.close(session)
