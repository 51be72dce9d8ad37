"""Shared fixtures: an isolated home for every test, real git repositories, a real `cortex` subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_repo


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test touches a real home: CORTEX_HOME and HOME point at a temp folder."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CORTEX_HOME", str(home / ".cortex"))
    monkeypatch.delenv("CORTEX_DIR", raising=False)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.setenv("CORTEX_SERVE_IDLE", "4")  # a `cortex serve` a hook starts exits soon after the test
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Cortex Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.com")
    return home


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository (pygit2) on branch main with one commit."""
    return make_repo(tmp_path / "project")


@pytest.fixture
def project(repo: Path) -> Path:
    """A git repository with `cortex init` already run."""
    from tests.helpers import cortex

    cortex("init", cwd=repo)
    return repo
