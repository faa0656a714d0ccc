"""Fixtures for the lab tests: the test-behaviour plugin file and synthetic result rows."""

from __future__ import annotations

from pathlib import Path

import pytest

PLUGIN = Path(__file__).with_name("plugin_behaviours.py")


@pytest.fixture(scope="session")
def behaviour_plugin() -> str:
    from inferlab.bench.plugins import load_plugin_files

    load_plugin_files([str(PLUGIN)])
    return str(PLUGIN)
