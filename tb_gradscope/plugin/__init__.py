"""The Gradscope TensorBoard plugin (backend).

`loader.GradscopeLoader` is the `tensorboard_plugins` entry point; `plugin`
serves the HTTP routes of docs/HTTP_API.md; `reader` and `cells` are the read
side shared with the command line. Nothing here imports tensorflow.
"""
