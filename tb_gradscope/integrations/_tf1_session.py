"""The two ways a TF1 training loop drives a GraphRecorder.

`RecordingSession` wraps a plain `tf.compat.v1.Session`; `GradscopeHook` plugs
into `MonitoredTrainingSession(hooks=[...])`. Both add the recorder's fetches
to the user's own run call and hand the results back to the recorder.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class RecordingSession:
    """A session whose `run()` also records gradient flow; see GraphRecorder.wrap.

    Only `run()` records (`make_callable` and `partial_run` pass through
    unrecorded). `close()` closes the recorder's update window and event file,
    then the session.
    """

    def __init__(self, session: Any, recorder: Any):
        self._session = session
        self._recorder = recorder

    def run(self, fetches: Any, feed_dict: Any = None, options: Any = None,
            run_metadata: Any = None) -> Any:
        """`Session.run`, plus the recorder's fetches at recorded steps."""
        run = self._session.run
        pending = self._recorder._before(run, fetches, feed_dict)
        if pending is None or not pending.fetches:
            result = run(fetches, feed_dict, options, run_metadata)
            if pending is not None:
                self._recorder._after(run, pending, {})
            return result
        try:
            result, extra = run((fetches, dict(pending.fetches)), feed_dict,
                                options, run_metadata)
        except tf.errors.OpError as e:
            if not self._recorder._owns(e):
                raise
            self._recorder._disable(f"{type(e).__name__} in {e.node_def.name}")
            return run(fetches, feed_dict, options, run_metadata)
        self._recorder._after(run, pending, extra)
        return result

    def close(self) -> None:
        self._recorder.close(self._session)
        self._session.close()

    def __enter__(self) -> "RecordingSession":
        self._session.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        self._recorder.close(self._session)
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
        return tf.compat.v1.train.SessionRunArgs(dict(self._pending.fetches))

    def after_run(self, run_context: Any, run_values: Any) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._recorder._after(run_context.session.run, pending, run_values.results or {})

    def end(self, session: Any) -> None:
        self._recorder.close(session)
