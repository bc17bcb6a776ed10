"""Entry points that attach tb_gradscope to existing training code.

`tb_gradscope.integrations.tf1` records TF1 graph-mode programs
(`tf.compat.v1.Session`, `MonitoredTrainingSession`). Importing this package
does not import tensorflow; import the submodule you need.
"""
