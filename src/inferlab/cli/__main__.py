"""`python -m inferlab.cli` is the same as the `inferlab` command."""

from inferlab.cli import console_main

console_main()
