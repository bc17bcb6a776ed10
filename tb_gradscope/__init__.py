"""tb_gradscope: see which subgraphs each loss updates.

Importing this package is cheap and never imports tensorflow: TensorBoard loads
`tb_gradscope.plugin` from here. The training-side API (`Recorder`, ...) is
imported on first use.
"""

__version__ = "0.1.0"
