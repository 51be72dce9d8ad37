"""Faults of the machine and of the input (issue 18): a read-only store, a full disk, a global store without
state/, writers racing the Stop hook's staging, terminal escapes in a title, malformed MCP input.

Each fault ends as one line and exit 1 for a command, exit 0 (and a log line when the log can be written) for a
hook, an error reply for the MCP server: never a traceback, never a hang.

How the machine's faults are made: the tests run as root here, and root ignores file modes, so `chmod -R a-w`
proves nothing. A read-only store is a read-only bind mount and a full disk a small tmpfs, each made inside a
private mount namespace (`unshare --mount`, `--map-root-user` too when not root) around one `cortex` process, so
nothing leaks to the machine. Where namespaces are not allowed, a non-root run falls back to `chmod -R a-w`
(EACCES instead of EROFS; the same code path), and a full disk is also injected in process (always run).
"""

from __future__ import annotations

import errno
import json
import os
import select
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pygit2
import pytest
from click.testing import CliRunner

from cortex.errors import MalformedMemory
from cortex.store import Store
from tests.helpers import cortex, cortex_command, git, hook, remember

POSTGRES = "Use Postgres for the ledger: row locks and JSONB, and SQLite was rejected for lack of concurrency"
PYTEST = "Run the unit suite with pytest -x before pushing"


def _env(tmp_path: Path) -> dict[str, str]:
    """A temp folder of the test's own: where cortex keeps what a read-only store cannot hold."""
    folder = tmp_path / "tmp"
    folder.mkdir(exist_ok=True)
    return {"TMPDIR": str(folder)}


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr


def _one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    _no_traceback(result)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cortex: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- 1. a read-only store


MOUNT_READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'


def _namespace() -> list[str]:
    return ["unshare", "--mount", *(["--map-root-user"] if os.geteuid() != 0 else [])]


@pytest.fixture(scope="session")
def read_only_way(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`mount` (a read-only bind mount in a private namespace) or `chmod` (not root, no namespaces)."""
    probe = tmp_path_factory.mktemp("probe")
    if shutil.which("unshare"):
        tried = subprocess.run([*_namespace(), "sh", "-c", MOUNT_READ_ONLY, "sh", str(probe), "touch", str(probe / "x")],
                               capture_output=True, text=True)
        if tried.returncode != 0 and "Read-only file system" in tried.stderr:
            return "mount"
    if os.geteuid() != 0:
        return "chmod"
    pytest.skip("root without mount namespaces: no way to make a folder read-only for root")


def _read_only(way: str, store: Path, *args: str, cwd: Path, env: dict[str, str],
               input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`cortex ARGS` with `store` read-only for that one process."""
    full_env = dict(os.environ, **env)
    if way == "mount":
        command = [*_namespace(), "sh", "-c", MOUNT_READ_ONLY, "sh", str(store), *cortex_command(), *args]
        return subprocess.run(command, cwd=cwd, env=full_env, input=input, capture_output=True, text=True, timeout=120)
    subprocess.run(["chmod", "-R", "a-w", str(store)], check=True)
    try:
        return subprocess.run([*cortex_command(), *args], cwd=cwd, env=full_env, input=input, capture_output=True,
                              text=True, timeout=120)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(store)], check=True)


@pytest.fixture
def checkout(project: Path) -> Iterator[Path]:
    """A project whose store was committed and checked out fresh: memories, no cache/, no state/ (as CI has it)."""
    store = Store.locate(project)
    remember(store, POSTGRES, type="decision", link=False)
    remember(store, PYTEST, link=False)
    shutil.rmtree(store.cache_dir, ignore_errors=True)
    shutil.rmtree(store.state_dir, ignore_errors=True)
    yield project


@pytest.mark.parametrize("cache", ["missing", "stale"])
def test_reads_work_from_a_read_only_store(checkout, tmp_path, read_only_way, cache):
    """Before: list, status, recall … died with OSError EROFS on cache/sync.lock. After: they answer, from a
    cache built where this user can write (the store's own one is read-only), and write nothing in the store."""
    env = _env(tmp_path)
    store = checkout / ".cortex"
    if cache == "stale":
        cortex("reindex", cwd=checkout, env=env)
        remember(Store.locate(checkout), "Webhook retries back off exponentially, five attempts", link=False)
    before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    ok: dict[tuple[str, ...], str] = {
        ("list",): "Use Postgres", ("list", "--json"): "Use Postgres", ("status",): "memories:",
        ("status", "--strict"): "problems: none", ("recall", "ledger row locks"): "Use Postgres",
        ("recall", "pytest", "--keyword"): "pytest", ("briefing",): "Use Postgres", ("gc", "--dry-run"): "nothing",
        ("project", "--check"): "", ("consolidate", "--dry-run"): "no near-duplicates", ("verify",): "cache matches",
    }
    if cache == "stale":
        ok[("recall", "webhook retries")] = "Webhook retries"
    for args, expected in ok.items():
        result = _read_only(read_only_way, store, *args, cwd=checkout, env=env)
        _no_traceback(result)
        if args != ("project", "--check"):  # no pages were ever written: "out of date" is its answer
            assert result.returncode == 0, (args, result.stderr)
        assert expected in result.stdout, (args, result.stdout, result.stderr)
    memory_id = cortex("list", "--json", cwd=checkout, env=env).stdout.split('"id": "')[1][:12]
    shown = _read_only(read_only_way, store, "show", memory_id, cwd=checkout, env=env)
    assert shown.returncode == 0 and memory_id in shown.stdout, shown.stderr
    after = sorted(str(p.relative_to(store)) for p in store.rglob("*")
                   if not str(p.relative_to(store)).startswith(("cache", "state")))
    assert after == [p for p in before if not p.startswith(("cache", "state"))]


def test_writes_to_a_read_only_store_fail_in_one_line(checkout, tmp_path, read_only_way):
    """Before: a traceback (OSError EROFS). After: `cortex: <path> is read-only; …`, exit 1, nothing changed."""
    env = _env(tmp_path)
    store = checkout / ".cortex"
    memory_id = cortex("list", "--json", cwd=checkout, env=env).stdout.split('"id": "')[1][:12]
    files = {p: p.read_bytes() for p in store.rglob("*.md")}
    word = "read-only" if read_only_way == "mount" else "permission denied"
    for args in (("remember", "Deploys go out on Tuesdays"), ("forget", memory_id, "--yes"), ("project",),
                 ("reindex",) if read_only_way == "chmod" else ("remember", "--type", "gotcha", "x y z")):
        result = _read_only(read_only_way, store, *args, cwd=checkout, env=env)
        line = _one_line_error(result, word)
        assert str(store) in line, line
    assert {p: p.read_bytes() for p in store.rglob("*.md")} == files


def test_hooks_on_a_read_only_store_exit_0_and_still_answer(checkout, tmp_path, read_only_way):
    env = _env(tmp_path)
    store = checkout / ".cortex"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s", "message": {
        "role": "assistant", "id": "m1", "content": [{"type": "text", "text": "[MEMORY: gotcha: CI is read-only]"}]}})
        + "\n", encoding="utf-8")
    payload = json.dumps({"session_id": "s", "cwd": str(checkout), "prompt": "which database for the ledger?",
                          "transcript_path": str(transcript)})
    for event, expected in (("session-start", "Use Postgres"), ("prompt", "Use Postgres"), ("stop", "")):
        result = _read_only(read_only_way, store, "hook", event, cwd=checkout, env=env, input=payload)
        _no_traceback(result)
        assert result.returncode == 0, (event, result.stderr)
        assert expected in result.stdout, (event, result.stdout, result.stderr)


# ---------------------------------------------------------------- 2. a full disk


FULL_DISK = """
set -e
store="$1"; out="$2"; shift 2
cp -a "$store" "$out/before"
mount -t tmpfs -o size=4m tmpfs "$store"
cp -a "$out/before/." "$store/"
mkdir -p "$store/state"
dd if=/dev/zero of="$store/state/fill" bs=64k 2>/dev/null || true
set +e
"$@" >"$out/stdout" 2>"$out/stderr" </dev/null
echo $? >"$out/code"
rm -f "$store/state/fill"
cp -a "$store/." "$out/after/"
"""


@pytest.fixture(scope="session")
def can_mount_tmpfs(tmp_path_factory: pytest.TempPathFactory) -> bool:
    probe = tmp_path_factory.mktemp("tmpfs")
    if not shutil.which("unshare"):
        return False
    tried = subprocess.run([*_namespace(), "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1"', "sh", str(probe)],
                           capture_output=True)
    return tried.returncode == 0


def _on_a_full_disk(project: Path, out: Path, *args: str, env: dict[str, str]) -> tuple[int, str, str, Path]:
    """Run `cortex ARGS` with the store on a full tmpfs; (exit code, stdout, stderr, the store afterwards)."""
    out.mkdir()
    (out / "after").mkdir()
    subprocess.run([*_namespace(), "sh", "-c", FULL_DISK, "sh", str(project / ".cortex"), str(out), *cortex_command(),
                    *args], cwd=project, env=dict(os.environ, **env), check=True, timeout=180)
    code = int((out / "code").read_text())
    return code, (out / "stdout").read_text(), (out / "stderr").read_text(), out / "after"


def _intact(before: Path, after: Path) -> None:
    """Every memory file as it was or whole and valid, and no temp file left behind."""
    from cortex import memory as fmt

    for path in after.rglob("*"):
        assert not (path.name.startswith(".") and path.name.endswith(".tmp")), path
    for path in (after / "memories").rglob("*.md"):
        fmt.parse(path.read_text(encoding="utf-8"), path)
        old = before / path.relative_to(after)
        assert not old.exists() or old.read_bytes() == path.read_bytes() or "archived" in path.read_text()


def test_a_full_disk_is_one_line_and_loses_nothing(checkout, tmp_path, can_mount_tmpfs):
    """Before: tracebacks (OSError ENOSPC). After: `cortex: <file>: no space left on the device; …`, exit 1;
    every file whole; the Stop hook exits 0."""
    if not can_mount_tmpfs:
        pytest.skip("no mount namespace for a small tmpfs (the in-process test below covers the error path)")
    env = _env(tmp_path)
    cortex("reindex", cwd=checkout, env=env)
    memory_id = cortex("list", "--json", cwd=checkout, env=env).stdout.split('"id": "')[1][:12]
    for n, args in enumerate((("remember", "Deploys go out on Tuesdays " * 400), ("forget", memory_id, "--yes"),
                              ("project",))):
        code, stdout, stderr, after = _on_a_full_disk(checkout, tmp_path / f"run{n}", *args, env=env)
        result = subprocess.CompletedProcess(args, code, stdout, stderr)
        _one_line_error(result, "no space left")
        _intact(tmp_path / f"run{n}" / "before", after)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s", "message": {
        "role": "assistant", "id": "m1", "content": [{"type": "text", "text": "[MEMORY: gotcha: " + "disk " * 3000
                                                                               + "]"}]}}) + "\n", encoding="utf-8")
    payload = json.dumps({"session_id": "s", "cwd": str(checkout), "transcript_path": str(transcript)})
    out = tmp_path / "stop"
    out.mkdir()
    (out / "after").mkdir()
    (out / "payload").write_text(payload)
    subprocess.run([*_namespace(), "sh", "-c", FULL_DISK.replace('</dev/null', f'<"{out}/payload"'), "sh",
                    str(checkout / ".cortex"), str(out), *cortex_command(), "hook", "stop"],
                   cwd=checkout, env=dict(os.environ, **env), check=True, timeout=180)
    assert (out / "code").read_text().strip() == "0"
    assert "Traceback" not in (out / "stderr").read_text() and not (out / "stdout").read_text()
    _intact(out / "before", out / "after")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES])
def test_a_write_refused_by_the_machine_is_one_line_in_process(project, monkeypatch, code):
    """The same, injected: the fsync of every durable write fails as a full disk (or quota, read-only, denied)."""
    from cortex.cli import main

    def refuse(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.chdir(project)
    monkeypatch.setattr("cortex.files.os.fsync", refuse)
    result = CliRunner().invoke(main, ["remember", "Deploys go out on Tuesdays"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cortex: ") and "/memories/context/deploys-go-out" in lines[0]
    assert not list((project / ".cortex" / "memories").rglob("*.md"))
    assert not [p for p in (project / ".cortex").rglob("*.tmp")]


# ---------------------------------------------------------------- 4. a global store made by `cortex init --global`


def test_init_global_makes_the_whole_layout_and_the_stop_keeps_it_up(project, isolated_env, tmp_path):
    """Before: no state/ in the global store, and every Stop logged FileNotFoundError. After: init makes
    memories/, cache/ and state/; a Stop leaves no error in either log, even when state/ was deleted since."""
    home = isolated_env / ".cortex"
    cortex("init", "--global", cwd=project)
    for folder in ("memories", "cache", "state"):
        assert (home / folder).is_dir(), folder
    assert (project / ".cortex" / "state").is_dir()
    shutil.rmtree(home / "state")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s", "message": {
        "role": "assistant", "id": "m1", "content": [{"type": "text", "text":
                                                      "[MEMORY: decision: Use SQLite for the local cache.]"}]}})
        + "\n", encoding="utf-8")
    result = hook("stop", project, {"session_id": "s", "cwd": str(project), "transcript_path": str(transcript)})
    assert result.returncode == 0 and "Traceback" not in result.stderr
    deadline = time.monotonic() + 30
    while not (home / "state" / "gc.stamp").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # the global upkeep runs detached
    assert (home / "state" / "gc.stamp").exists(), "the global store's upkeep did not run"
    for log in (project / ".cortex" / "state" / "cortex.log", home / "state" / "cortex.log"):
        text = log.read_text() if log.exists() else ""
        assert "Error" not in text, text


# ---------------------------------------------------------------- 5. writers racing the Stop hook's staging


def test_staging_never_takes_a_temp_file_and_survives_files_vanishing(project):
    """Before: a temp file of another writer was staged, or vanished between `git status` and staging and the
    Stop gave up (4 in 120 concurrent Stops). After: temp files are never staged and vanished paths skipped."""
    from cortex.gitops import record_cortex_changes

    store = Store.locate(project)
    remember(store, POSTGRES, type="decision", link=False)
    folder = store.memories_dir / "decision"
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:  # what other writers' atomic writes look like to `git status`
        n = 0
        while not stop.is_set():
            temp = folder / f".use-postgres.md.{n:06d}.tmp"
            temp.write_text("half")
            temp.unlink()
            n += 1

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        for _ in range(150):
            try:
                record_cortex_changes(store.root, "stage")
            except BaseException as exc:  # noqa: BLE001 - any failure is the bug
                errors.append(exc)
    finally:
        stop.set()
        writer.join()
    assert not errors, errors[:3]
    staged = [entry.path for entry in pygit2.Repository(str(project)).index]
    assert not [path for path in staged if path.endswith(".tmp")], staged
    assert any(path.startswith(".cortex/memories/decision/") for path in staged)


TOPICS = ["Postgres for the ledger", "Redis for sessions", "Kafka for the audit stream", "S3 for invoices",
          "gRPC between services", "OpenAPI for the public API", "Terraform for infrastructure", "Argo for deploys",
          "Sentry for crash reports", "Vault for secrets", "Jaeger for tracing", "Celery for email jobs",
          "Playwright for browser tests", "Ruff for linting", "Poetry for packaging", "Nginx at the edge"]


@pytest.mark.long
def test_concurrent_stop_hooks_each_stage_what_they_wrote(project, tmp_path):
    """Sixteen Stops at once, as parallel sessions end: all exit 0, none logs an error, every memory written is
    staged, no temp file is."""
    def transcript(n: int, topic: str) -> str:
        path = tmp_path / f"t{n}.jsonl"
        path.write_text(json.dumps({"type": "assistant", "uuid": f"a{n}", "sessionId": f"s{n}", "message": {
            "role": "assistant", "id": f"m{n}", "content": [{"type": "text", "text":
                                                             f"[MEMORY: decision: Use {topic}; agreed in review {n}.]"}]}})
            + "\n", encoding="utf-8")
        return json.dumps({"session_id": f"s{n}", "cwd": str(project), "transcript_path": str(path)})

    runs = [subprocess.Popen([*cortex_command(), "hook", "stop"], cwd=project, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in TOPICS]
    for n, (run, topic) in enumerate(zip(runs, TOPICS)):
        run.communicate(transcript(n, topic), timeout=120)
    assert [run.returncode for run in runs] == [0] * len(TOPICS)
    log = (project / ".cortex" / "state" / "cortex.log").read_text().splitlines()
    assert len([line for line in log if " stop: " in line]) == len(TOPICS), log
    assert not [line for line in log if "Error" in line or "failed" in line], log
    written = {f".cortex/{p.relative_to(project / '.cortex').as_posix()}"
               for p in (project / ".cortex" / "memories").rglob("*.md")}
    staged = set(git(project, "diff", "--cached", "--name-only").stdout.split())
    assert len(written) == len(TOPICS) and written <= staged, written - staged
    assert not [path for path in staged if path.endswith(".tmp")]


def test_a_path_gone_after_git_status_is_skipped(project, monkeypatch):
    """The race made certain: `git status` reports a new file that is gone when staging starts."""
    import cortex.gitops as gitops

    store = Store.locate(project)
    real = gitops.open_repository

    class Racing:
        def __init__(self, repo: Any) -> None:
            self._repo = repo

        def __getattr__(self, name: str) -> Any:
            return getattr(self._repo, name)

        def status(self) -> dict[str, int]:
            gone = ".cortex/memories/context/gone-0123456789ab.md"
            return dict(self._repo.status(), **{gone: pygit2.enums.FileStatus.WT_NEW})

    monkeypatch.setattr(gitops, "open_repository", lambda path: Racing(real(path)))
    remember(store, PYTEST, link=False)
    staged = gitops.record_cortex_changes(store.root, "stage")
    assert staged and not [p for p in staged if "gone-" in p]
    assert "gone-" not in json.dumps(gitops.record_cortex_changes(store.root, "commit"))


def test_a_temp_file_left_by_a_killed_writer_is_removed_and_never_staged(project, tmp_path):
    """Before: a consolidate killed mid-write left `.x.md.<random>.tmp`, and the next Stop staged it. After: a
    writer holding the lock removes temp files older than a few minutes (once the last sweep is that old too:
    `state/swept`); no Stop stages one."""
    store = Store.locate(project)
    remember(store, POSTGRES, type="decision", link=False)
    swept = store.state_dir / "swept"
    assert swept.exists()  # the remember's writer swept
    os.utime(swept, (time.time() - 3600, time.time() - 3600))  # an hour ago
    folder = store.memories_dir / "decision"
    stale = folder / ".use-postgres-abc.md.k1ll3d.tmp"
    fresh = folder / ".use-postgres-abc.md.w0rk1n.tmp"
    for temp in (stale, fresh):
        temp.write_text("---\nid: half\n")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s", "message": {
        "role": "assistant", "id": "m1", "content": [{"type": "text", "text":
                                                      "[MEMORY: gotcha: The staging server resets nightly.]"}]}})
        + "\n", encoding="utf-8")
    result = hook("stop", project, {"session_id": "s", "cwd": str(project), "transcript_path": str(transcript)})
    assert result.returncode == 0
    staged = git(project, "diff", "--cached", "--name-only").stdout.split()
    assert any("staging-server" in path for path in staged), staged
    assert not [path for path in staged if path.endswith(".tmp")], staged
    assert not stale.exists(), "a stale temp file survived a writer"
    assert fresh.exists(), "a temp file a live writer may still rename was removed"


# ---------------------------------------------------------------- 6. terminal escapes in what is printed


EVIL_TITLE = "Evil \x1b]0;pwned\x07\x1b[31mred\x1b[0m title \x9b5m"
EVIL_BODY = "Evil body \x1b[2J clears \x9b31m and keeps\ta tab\nand lines\r\n\x08\x7f"


def test_control_characters_in_a_memory_never_reach_the_terminal(project):
    """Before: `list`, `recall` and `show` printed a title's escape sequences raw (retitle, recolour, clear the
    terminal). After (issue 37): a memory holding a control character is refused on write, and a file holding one
    is skipped and named in one printable line; a bidi control, which a valid memory may hold, is shown as a
    visible escape; JSON output keeps the exact text, escaped as JSON."""
    store = Store.locate(project)
    with pytest.raises(MalformedMemory, match="control character U\\+001B"):
        remember(store, EVIL_BODY, title=EVIL_TITLE, type="gotcha", link=False)
    folder = project / ".cortex" / "memories" / "gotcha"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil-0123456789ab.md").write_text(
        '---\nid: 0123456789ab\ntype: gotcha\ntitle: "Evil \\e]0;pwned\\a title"\n---\nEvil body.\n', encoding="utf-8")
    created = remember(store, "Evil body with a \u202e bidi override", title="Evil \u202etitle", type="gotcha",
                       link=False)
    wide = {"COLUMNS": "200"}  # the whole title fits the list's width
    raw = [cortex("list", cwd=project, env=wide), cortex("recall", "evil title", cwd=project),
           cortex("show", created.id, cwd=project), cortex("status", cwd=project, check=False)]
    for result in raw:
        text = result.stdout + result.stderr
        bad = [ch for ch in text if (ord(ch) < 32 and ch not in "\n\t") or 0x7f <= ord(ch) <= 0x9f or ch == "\u202e"]
        assert not bad, (bad, text)
    assert "Evil \\u202etitle" in raw[0].stdout and "evil-0123456789ab.md" in raw[0].stderr
    assert "U+001B" in raw[3].stdout and "\\u202e bidi" in raw[2].stdout
    for args in (("list", "--json"), ("show", created.id, "--json"), ("recall", "evil title", "--json")):
        out = cortex(*args, cwd=project).stdout
        assert not [ch for ch in out if (ord(ch) < 32 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f or ch == "\u202e"]
        data = json.loads(out)
        record = data if isinstance(data, dict) else data[0]
        assert (record.get("title") or record["memory"]["title"]) == "Evil \u202etitle"


def test_a_skipped_file_is_reported_in_one_printable_line(project):
    """`list` names a malformed file it skips; the name itself may hold an escape sequence."""
    folder = project / ".cortex" / "memories" / "context"
    folder.mkdir(parents=True)
    (folder / "\x1b[31mred\x1b[0m-0123456789ab.md").write_text("not a memory\n", encoding="utf-8")
    result = cortex("list", cwd=project)
    line = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert len(line) == 1 and "\x1b" not in line[0] and "\\x1b[31mred" in line[0], result.stderr


# ---------------------------------------------------------------- 7. malformed MCP input


def test_malformed_mcp_input_gets_a_json_rpc_error_and_the_server_stays_up(project, isolated_env):
    """Before: a line that is not JSON, not UTF-8, a batch array or non-object params got no reply at all (a
    client waits forever). After: -32700 Parse error / -32600 Invalid Request with id null, and the next
    request is answered."""
    env = dict(os.environ, HOME=str(isolated_env), CORTEX_HOME=str(isolated_env / ".cortex"))
    server = subprocess.Popen([*cortex_command(), "mcp"], cwd=project, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None

    def send(line: bytes) -> None:
        server.stdin.write(line)
        server.stdin.flush()

    def reply(timeout: float = 20) -> dict[str, Any]:
        ready, _, _ = select.select([server.stdout], [], [], timeout)
        assert ready, "no reply"
        return json.loads(server.stdout.readline())

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
             + b"\n")
        assert reply()["id"] == 1
        send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        cases = [(b"this is not json\n", -32700), (b'{"jsonrpc": "2.0", "id": 2, "method": "ping"\n', -32700),
                 (b'\xff\xfe{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n', -32700),
                 (b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"x": "caf\xe9"}}\n', -32700),
                 (b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]\n', -32600),
                 (b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": [1, 2]}\n', -32600),
                 (b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": "x"}\n', -32600),
                 (b'"just a string"\n', -32600), (b"{}\n", -32600)]
        for line, code in cases:
            send(line)
            answer = reply()
            assert answer == {"jsonrpc": "2.0", "id": None, "error": answer["error"]}, (line, answer)
            assert answer["error"]["code"] == code, (line, answer)
        send(b"\n")  # a blank line is nothing: no reply, no harm
        send(b'{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}\n')
        answer = reply()
        assert answer["id"] == 8 and any(tool["name"] == "cortex_search" for tool in answer["result"]["tools"])
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=20)
        finally:
            if server.poll() is None:
                server.kill()
    assert server.returncode == 0
    assert b"Traceback" not in server.stderr.read()


def test_every_command_that_prints_a_title_escapes_control_characters(project):
    """forget's "best match", gc, consolidate and capture print titles too: none lets a bidi control through (a
    memory cannot hold an escape sequence since issue 37; a bidi control it may)."""
    store = Store.locate(project)
    remember(store, "Evil body \u202e reversed", title="Evil \u202etitle", type="gotcha", link=False)
    remember(store, "Evil body \u202e reversed", title="Evil \u202etitle again", type="gotcha", link=False)
    outputs = [cortex("consolidate", "--dry-run", cwd=project, check=False),
               cortex("forget", "evil title", "--yes", cwd=project, check=False)]
    for result in outputs:
        _no_traceback(result)
        text = result.stdout + result.stderr
        assert not [ch for ch in text if (ord(ch) < 32 and ch not in "\n\t") or 0x7f <= ord(ch) <= 0x9f
                    or ch == "\u202e"], text
    assert "\\u202e" in outputs[1].stderr  # the best match was shown, escaped
