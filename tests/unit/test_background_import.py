import importlib
import subprocess
import sys

import pytest

from inferlab.cli.background_import import import_in_background


def test_a_module_imported_in_the_background_is_the_one_the_main_thread_gets(tmp_path, monkeypatch):
    (tmp_path / "slow_module_for_test.py").write_text("import time\ntime.sleep(0.2)\nVALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    thread = import_in_background("slow_module_for_test")
    module = importlib.import_module("slow_module_for_test")  # waits for the thread's import (the module lock)
    thread.join(5)
    assert module.VALUE == 7 and sys.modules["slow_module_for_test"] is module
    del sys.modules["slow_module_for_test"]


def test_a_failed_background_import_is_silent_and_raised_again_by_the_main_threads(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_module_for_test.py").write_text("raise ImportError('the fix: install it')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import_in_background("broken_module_for_test").join(5)
    assert capsys.readouterr().err == ""  # no thread traceback on the terminal
    with pytest.raises(ImportError, match="the fix"):
        importlib.import_module("broken_module_for_test")


def test_the_engines_background_start_imports_torch_and_the_engine_itself():
    # in a fresh interpreter: the package inferlab.engine alone imports no torch, so a thread that imported only
    # it would leave the whole import to the main thread (what this test catches)
    script = ("import sys\nfrom inferlab.cli.background_import import start_engine_in_background\n"
              "start_engine_in_background('cpu').join(120)\n"
              "print('torch' in sys.modules, 'inferlab.engine.engine' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=True)
    assert out.stdout.split() == ["True", "True"]
