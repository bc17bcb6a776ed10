"""A prelude for scripts that must run as where tensorflow is not installed.

`NO_TENSORFLOW` is Python source: prepended to a script, it makes tensorflow,
keras and tf_keras look absent, as in a venv that installed
`tb-gradscope[torch]` only: `import tensorflow` raises ModuleNotFoundError and
`importlib.util.find_spec("tensorflow")` answers None (torch._dynamo asks it
of every module it has trace rules for, and a finder that raised there would
crash torch, not the code under test). A `None` entry in `sys.modules` is
Python's own way to say "this import must fail".
"""

BLOCKED = ("tensorflow", "keras", "tf_keras")

NO_TENSORFLOW = f"""\
import sys
for _name in {BLOCKED!r}:
    sys.modules[_name] = None  # import fails; find_spec answers None
"""

# Appended to a script: no module of a blocked package got loaded anyway.
NONE_LOADED = f"""
assert not [m for m in sys.modules if m.split(".")[0] in {BLOCKED!r} and sys.modules[m] is not None]
"""
