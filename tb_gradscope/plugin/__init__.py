"""The Gradscope TensorBoard plugin (backend): HTTP routes, caching, TensorBoard plumbing.

`loader.GradscopeLoader` is the `tensorboard_plugins` entry point (flags,
retention); `plugin` serves the routes of docs/HTTP_API.md over
`context.data_provider`; `cache` keeps each run's decoded series; `views` and
`timeseries` slice them into route data, `export` into CSV, `encoding` makes
numbers JSON-safe; `static` serves the built frontend. Every conclusion comes
from `tb_gradscope.read`. Imports `format`, `read` and `scopes`, never
tensorflow; imported by TensorBoard only (nothing in tb_gradscope imports it).
"""
