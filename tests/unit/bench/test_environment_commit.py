"""The commit a row records: the checkout's, unless the runner names it (the device's copy has a stale .git)."""

from __future__ import annotations

import subprocess

from inferlab.environment import COMMIT_ENV_VAR, git_commit


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_named_commit_wins_over_a_stale_checkout(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("x")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m")
    monkeypatch.delenv(COMMIT_ENV_VAR, raising=False)
    head, dirty = git_commit(tmp_path)
    assert len(head) == 40 and dirty is False
    monkeypatch.setenv(COMMIT_ENV_VAR, "62ba70b")
    assert git_commit(tmp_path) == ("62ba70b", None)
    monkeypatch.delenv(COMMIT_ENV_VAR)
    assert git_commit(tmp_path / "missing") == (None, None)
