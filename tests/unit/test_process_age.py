import subprocess
import sys
import time

import pytest

from inferlab.cli.process_age import process_age_s


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_process_knows_how_long_it_has_run():
    """A child that sleeps 0.5 s before asking reports at least that; this process at least its own age."""
    code = "import time; time.sleep(0.5); from inferlab.cli.process_age import process_age_s; print(process_age_s())"
    started = time.perf_counter()
    reported = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.5 <= reported <= time.perf_counter() - started + 0.02  # /proc's ticks: 10 ms
    assert process_age_s() > 0
