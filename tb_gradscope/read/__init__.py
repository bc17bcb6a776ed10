"""The read side's conclusions: what a decoded log says about gradient flow.

Turns records decoded by `tb_gradscope.format` into the states, verdicts and
figures a user acts on, for the plugin (`tb_gradscope.plugin`) and the command
line (`tb_gradscope.commands`) alike, so the tab and the CLI cannot disagree.
Never imports tensorflow; imports only `format`, `scopes` and `rules`.
"""
