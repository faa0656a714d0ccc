"""`python -m inferlab.cli` is the same as the `inferlab` command."""

import sys

from inferlab.cli import main

sys.exit(main())
