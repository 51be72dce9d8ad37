"""End-to-end fixtures: the pinned `claude` CLI must be installed (`npm ci --prefix tests/e2e`); a missing one fails."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tests.e2e.harness import CLAUDE_VERSION, Sandbox, claude_version


@pytest.fixture(scope="session")
def claude_cli() -> str:
    """The version of the installed `claude`, which must be the pinned one."""
    found = claude_version()
    assert found == CLAUDE_VERSION, f"tests/e2e has claude {found}, package.json pins {CLAUDE_VERSION}: run npm ci --prefix tests/e2e"
    return found


@pytest.fixture(scope="module")
def sandbox(claude_cli: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Sandbox]:
    """Make a Sandbox (temporary HOME + git repository) under this module's temp folder."""
    def make(name: str) -> Sandbox:
        return Sandbox(Path(tmp_path_factory.mktemp(name)))
    return make
