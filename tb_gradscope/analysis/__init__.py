"""Static flow analysis: a traced training step -> FlowGraph (plain data).

`analyze_graph` takes a FuncGraph or TF1 graph, `analyze_function` traces a
Python step function first. Never writes summaries: the recorder does.
These names are the package's API; its modules are private (underscored).
Imports only `format` and `scopes` (and tensorflow); imported by `record`,
`integrations` and `tb_gradscope.testing`.
"""

from tb_gradscope.analysis._core import analyze_graph
from tb_gradscope.analysis._fingerprint import fingerprint
from tb_gradscope.analysis._function import UNTRACED_MESSAGE, analyze_function, untraced_message
from tb_gradscope.analysis._inputs import AnalysisError

__all__ = [
    "AnalysisError",
    "UNTRACED_MESSAGE",
    "analyze_function",
    "analyze_graph",
    "fingerprint",
    "untraced_message",
]
