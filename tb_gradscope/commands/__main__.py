"""`python -m tb_gradscope.commands report|check ...`."""

import sys

from tb_gradscope.commands import main

sys.exit(main())
