"""Shared fixtures: an isolated home for every test, real git repositories, a store in one."""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import EXAMPLE_STORE, cortex, make_repo


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package once before the tests (in the controller, not in each xdist worker): an editable
    install under `PYTHONDONTWRITEBYTECODE=1` otherwise recompiles every module in every `cortex` subprocess,
    which a regular install never does (pip compiles at install)."""
    if hasattr(config, "workerinput"):
        return
    _temp_folders_in_memory(config)
    import compileall

    import cortex as package

    compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)


def _temp_folders_in_memory(config: pytest.Config) -> None:
    """The tests' temp folders (pytest's numbered `pytest-of-USER/pytest-N`, kept three runs) in /dev/shm when the
    machine has one: the real git, SQLite and Whoosh under test fsync thousands of times a run, which waits on a
    disk and not on RAM, and no test is about the disk. `--basetemp` or a set `PYTEST_DEBUG_TEMPROOT` wins."""
    memory = Path("/dev/shm")
    if config.option.basetemp or "PYTEST_DEBUG_TEMPROOT" in os.environ or not os.access(memory, os.W_OK | os.X_OK):
        return
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(memory)  # read by pytest's tmp_path_factory; xdist workers inherit it


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `long` first, the rest in their order: xdist hands tests out in this order, and a long one
    handed out last keeps the run waiting on one worker after the other has finished."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(scope="session")
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One user cache (`XDG_CACHE_HOME`) for the session's tests: the transformer's weights are unpacked into it
    once (43 MB), not once per test (`contextual.Unpacked`; its own test uses a cache of its own)."""
    return tmp_path_factory.mktemp("user-cache")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                 user_cache: Path) -> Iterator[Path]:
    """No test touches a real home: CORTEX_HOME and HOME point at a temp folder."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_cache))
    monkeypatch.setenv("CORTEX_HOME", str(home / ".cortex"))
    monkeypatch.delenv("CORTEX_DIR", raising=False)
    monkeypatch.delenv("CORTEX_LOCK_WAIT", raising=False)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.setenv("CORTEX_SERVE_IDLE", "4")  # a `cortex serve` a hook starts exits soon after the test
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Cortex Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.com")
    above = [folder / name for folder in tmp_path_factory.getbasetemp().parents for name in (".git", ".cortex")]
    before = {path for path in above if path.exists()}
    yield home
    # A `.git` or `.cortex` above the temp folders turns every "outside a repository" test of the run into a
    # project's: it is removed, and the test that saw it appear is named in a warning (Codex CLI's sandbox made one
    # in /tmp until its config left /tmp out: tests/e2e/otherclis.py).
    stray = [path for path in above if path.exists() and path not in before]
    for path in stray:
        shutil.rmtree(path, ignore_errors=True)
    if stray:
        warnings.warn(f"{stray} appeared above the temp folders during this test (or one running beside it)")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository (pygit2) on branch main with one commit."""
    return make_repo(tmp_path / "project")


@pytest.fixture
def project(repo: Path) -> Path:
    """A git repository with a store in `.cortex/`, as `cortex init` makes it (in process: tests of the
    command itself run it on `repo`)."""
    from cortex.store import STORE_DIRNAME, Store

    Store.init(repo / STORE_DIRNAME)
    return repo


@pytest.fixture(scope="session")
def example_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example store (.cortex-example) copied once, its cache built by `cortex reindex` and a recall."""
    folder = tmp_path_factory.mktemp("example-built") / "example"
    shutil.copytree(EXAMPLE_STORE, folder, ignore=shutil.ignore_patterns("cache", "state"))
    env = {"CORTEX_HOME": str(folder.parent / "home")}
    cortex("reindex", "--dir", str(folder), cwd=folder, env=env)
    cortex("recall", "warm up", "--dir", str(folder), cwd=folder, env=env)  # caches the query tokenizer too
    return folder


@pytest.fixture
def example_store(tmp_path: Path, example_built: Path) -> Path:
    """A private copy of the example store with its cache ready (copied, file times kept) and no state:
    no reads counted, no locks; what a test does to it stays in the test."""
    folder = tmp_path / "example"
    shutil.copytree(example_built, folder, ignore=shutil.ignore_patterns("state"))
    return folder
