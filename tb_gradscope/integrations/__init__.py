"""Entry points that attach tb_gradscope to existing training code, one package
per framework: `tb_gradscope.integrations.keras` (`GradscopeCallback` for
`model.fit`) and `tb_gradscope.integrations.tf1` (`GraphRecorder` for
`tf.compat.v1.Session` and `MonitoredTrainingSession` programs). Importing this
package does not import tensorflow; import the framework you need. They build
on `record`, `analysis`, `pairs` and `rules`; imported by users, the root's
lazy names and `demos`: nothing below `integrations` imports them.
"""
