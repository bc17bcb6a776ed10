"""Runnable demos of the seed scenarios, each a clean run and a deliberately leaky twin.

`tb-gradscope demo LOGDIR` trains them all (see `runner.run_demos`). Every demo
module defines `DEMO` (a `spec.Demo`) whose `rules` say, as plain strings,
what the clean twin keeps and the leaky twin breaks. Imports `record`,
`integrations` and `pairs` like any user script; imported by `tb_gradscope.cli`
only: library code never imports this package.
"""
