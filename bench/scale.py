"""Issue 21's table: what each command and hook costs at 1,000, 10,000 and 100,000 memories.

    python bench/scale.py [--sizes 1000,10000,100000] [--runs 5] [--transcript PATH] [--stop-max 10000]
                          [--no-reindex] [--no-contextual] [--source TREE] [--contextual-from CACHE]

Everything runs from a regular (non-editable) install of this tree made in a
temporary virtual environment (`regular_install`): the package copied into its
site-packages as pip would install it, the dependencies taken from the
project's venv, and its `cortex` console script as pip writes it (what hooks
and people run; `python -m cortex` would add runpy's imports). An editable
install's `python -c pass` is ~10 ms slower (its import finder runs at every
start), which would flatter every ratio. Ratios
are to that install's `python -c pass`, measured in the same run. Each cell
gives the wall time and, in brackets, the CPU time the process used (user +
system, from `getrusage`): on a machine shared with other work the CPU time
is the steadier of the two. `--source TREE` installs another tree (e.g. `git
archive` of an older commit) for a before/after table.

For each size: a generated store in a git repository, committed with its
pages (`cortex project`) and indexed (`cortex reindex`, timed, with its peak
memory), then, medians of `--runs` fresh processes unless said:

- no server running: `list`, `status`, `recall`, the prompt hook, a
  SessionStart after a memory file was written behind cortex's back (as a
  pull with no git hook writes it: since stop 23 the hook prints the last
  briefing) and the session's first prompt a second later (it says what
  changed), a SessionStart after a commit (HEAD moved; no server), a
  SessionStart after a `cortex remember` (which
  started the briefing's build ahead; how long that took is its own row),
  `remember`;
- `cortex serve` started: how long until it answers (`state`) and until it is
  warm (`ping`); then the prompt hook served (a different prompt each run:
  the server keeps its last queries' vectors), `list`, `status` and `recall`
  with the server vouching for the files, the cached SessionStart, and the
  SessionStart after a memory changed once the server rebuilt the briefing
  (how long that took is its own row, median of the runs);
- in process (one BLAS thread, as `cortex serve` runs): recall p50 / p95 over
  40 queries;
- with `--transcript`: the Stop hook on a copy of the committed repository,
  cold (the whole transcript) and after one more turn.

Byte code is compiled first (see bench/store.py). The machine's load average
is printed with each size: whole-process numbers move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TURN = json.dumps({"type": "assistant", "uuid": "bench-extra", "sessionId": "bench",
                   "message": {"id": "bench-msg", "role": "assistant",
                               "content": [{"type": "text", "text": "Done; the tests pass."}]}})
PROMPTS = ["why did we pick sqlite for the cache?", "flaky test in ci again", "redis timeout on deploy",
           "how do users stay logged in between visits", "what does the api send back when a payment fails",
           "where do slow jobs like sending receipt emails run", "do we mock the database in unit tests",
           "how does a new version get to production", "which linter and formatter should I run before pushing",
           "why are prices stored as whole numbers", "the webhook retries keep piling up in the queue",
           "can I rename the migrations folder", "what broke the docker build on the release branch"]


def prompts(root: Path) -> Callable[[int], str]:
    """A different prompt each run (the server remembers its last few queries' vectors)."""
    return lambda n: hook_payload(root, "UserPromptSubmit", prompt=f"{PROMPTS[n % len(PROMPTS)]} ({n // len(PROMPTS)})"
                                  if n >= len(PROMPTS) else PROMPTS[n])
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def regular_install(folder: Path, source: Path = REPO) -> str:
    """A venv holding this tree as a regular install; returns its python. No network, no build backend:
    the package is copied where pip puts it, the dependencies come from the project's venv through a .pth
    line (a .pth inside a path added that way is not run, so the editable finder stays out)."""
    import compileall
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source / "cortex", site / "cortex", ignore=ignore)
    shutil.copytree(source / "templates", site / "cortex" / "templates", ignore=ignore, dirs_exist_ok=True)
    (site / "cortex" / "templates" / "__init__.py").touch()
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    compileall.compile_dir(str(site / "cortex"), quiet=1)
    # The `cortex` console script, as pip writes it: what the hooks and a person run.
    script = folder / "bin" / "cortex"
    script.write_text(f"#!{python}\nimport sys\nfrom cortex.__main__ import run\nif __name__ == '__main__':\n"
                      f"    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(run())\n", encoding="utf-8")
    script.chmod(0o755)
    return str(python)


def console_script(python: str) -> list[str]:
    """The install's `cortex` command (next to its python)."""
    return [str(Path(python).parent / "cortex")]


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "bench",
                "GIT_COMMITTER_EMAIL": "b@example.com", "CORTEX_SERVE_IDLE": "600"})
    return env | (extra or {})


class Time(float):
    """Wall milliseconds, carrying the CPU milliseconds (user + system) the process used: on a machine shared
    with other work the CPU time moves much less than the wall time."""

    cpu: float = 0.0

    @classmethod
    def of(cls, wall: float, cpu: float) -> Time:
        made = cls(wall)
        made.cpu = cpu
        return made


def timed(cmd: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None) -> Time:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, input=stdin.encode() if stdin is not None else None,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Time.of(wall, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)


def median_of(times: list[Time]) -> Time:
    return Time.of(statistics.median(times), statistics.median(t.cpu for t in times))


def median(cmd: list[str], cwd: Path, env: dict[str, str], runs: int, stdin: str | Callable[[int], str] | None = None,
           before: object = None) -> Time:
    """Median of `runs` runs after one warm-up; `stdin` may be a function of the run's number (a prompt hook
    gets a new prompt each time, as a person types them: a server caches the last few)."""
    times = []
    for n in range(runs + 1):  # one warm-up run
        if callable(before):
            before()
        times.append(timed(cmd, cwd, env, stdin(n) if callable(stdin) else stdin))
    return median_of(times[1:])


def hook_payload(root: Path, event: str, **fields: str) -> str:
    return json.dumps({"session_id": "bench", "cwd": str(root), "hook_event_name": event, **fields})


def ask(root: Path, op: str, timeout: float = 30) -> dict[str, object] | None:
    from cortex import serve

    return serve.ask(str(root / ".cortex"), {"op": op}, timeout=timeout)


def stop_servers(root: Path) -> None:
    """Stop the store's `cortex serve`, one that is still starting included, and wait until it is gone (its
    socket and its lock: a server on its way out still counts as running for the hooks)."""
    import signal

    from cortex.layout import server_up

    deadline = time.time() + 30
    while time.time() < deadline and server_up(str(root / ".cortex")):
        answer = ask(root, "state", 1)
        if answer and isinstance(answer.get("pid"), int):
            try:
                os.kill(int(answer["pid"]), signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def settle(root: Path, limit: float = 60.0) -> None:
    """Wait until no detached `cortex maintain` runs in this project."""
    from cortex.layout import lock_held

    lock = root / ".cortex" / "state" / "maintain-run.lock"
    deadline = time.time() + limit
    time.sleep(0.3)
    while time.time() < deadline and lock.exists() and lock_held(str(lock)):
        time.sleep(0.1)


def first_id(root: Path) -> str:
    """The id of one memory of the store (for `cortex show`)."""
    path = min((root / ".cortex" / "memories" / "decision").glob("*.md"))
    return path.stem.rsplit("-", 1)[-1]


def touch_memory(root: Path, n: int) -> None:
    """Write one new memory, as a Stop would (a new file and `state/changed`): the briefing must be rebuilt.
    (An edit in place changes no folder's mtime, so the briefing's key would not see it before a sync.)"""
    from cortex.memory import Memory
    from cortex.store import Store

    Store(root / ".cortex", "project").create(Memory(
        id="", type="decision", title=f"Bench decision {n}: keep the {n}th queue on its own worker",
        body=f"Decided in run {n}: one worker per queue, so a slow consumer cannot starve the others.\n"))


def write_by_hand(root: Path, n: int) -> None:
    """Write one new memory file as a `git pull` or an editor would: not through cortex (`state/changed` is
    not touched, no briefing is built ahead)."""
    folder = root / ".cortex" / "memories" / "decision"
    folder.mkdir(parents=True, exist_ok=True)
    ident = f"{0xb0000000 + n:012x}"
    (folder / f"pulled-decision-{n}-{ident}.md").write_text(
        f"---\nid: {ident}\ntype: decision\ntitle: Pulled decision {n} - the {n}th export runs nightly\n---\n"
        f"Decided by a teammate: export {n} runs nightly, not on every request.\n", encoding="utf-8")


IN_PROCESS = """
import json, statistics, sys, time
from pathlib import Path
from cortex.index import Index
from cortex.recall import recall_store
from cortex.store import Store
store = Store.locate(Path(sys.argv[1]))
index = Index(store)
index.sync()
queries = %r
recall_store(store, "warm up", index=index, sync=False)
times = []
for n in range(40):
    start = time.perf_counter()
    recall_store(store, queries[n %% len(queries)], index=index, sync=False)
    times.append((time.perf_counter() - start) * 1000)
times.sort()
print(json.dumps([times[len(times) // 2], times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]]))
""" % (PROMPTS + ["schema migration order", "deploy rollback went wrong", "webhook retries"],)


def reindex(python: str, root: Path, env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak MB) of `cortex reindex` from nothing."""
    shutil.rmtree(root / ".cortex" / "cache", ignore_errors=True)
    start = time.perf_counter()
    result = subprocess.run(["/usr/bin/time", "-f", "%M", python, "-m", "cortex", "reindex"], cwd=root, env=env,
                            capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    return seconds, int(result.stderr.strip().splitlines()[-1]) / 1024


def make_project(root: Path, size: int, python: str, env: dict[str, str], do_reindex: bool,
                 contextual: bool = True, contextual_from: Path | None = None) -> dict[str, str]:
    import pygit2

    row: dict[str, str] = {}
    pygit2.init_repository(str(root), initial_head="main")
    subprocess.run([python, "-m", "cortex", "init"], cwd=root, env=env, check=True, capture_output=True)
    if not contextual:
        config = root / ".cortex" / "config.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace("contextual: true", "contextual: false"),
                          encoding="utf-8")
    generate(root / ".cortex", size)
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-q", "-m", "store"], cwd=root, env=env, check=True, capture_output=True)
    time.sleep(2.1)  # past the racy window
    if do_reindex:
        seconds, peak = reindex(python, root, env)
        row["reindex"] = f"{seconds:.1f} s, {peak:.0f} MB"
    else:
        subprocess.run([python, "-m", "cortex", "reindex"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run([python, "-m", "cortex", "project"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "add", "-A", ".cortex"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-q", "-m", "pages"], cwd=root, env=env, check=True, capture_output=True)
    if contextual and contextual_from is not None:  # the vectors are keyed by text hash: the same memories' fit
        import sqlite3

        with sqlite3.connect(root / ".cortex" / "cache" / "cache.db") as db:
            db.execute("ATTACH ? AS earlier", (str(contextual_from / "cache.db"),))
            db.execute("INSERT OR IGNORE INTO vectors SELECT * FROM earlier.vectors WHERE model LIKE 'contextual:%'")
    if contextual:  # every memory's contextual vector, as the detached upkeep leaves them: no bulk fill while timing
        started = time.perf_counter()
        subprocess.run([python, "-c", "import sys; from pathlib import Path; from cortex import maintain; "
                        "from cortex.store import Store; maintain.fill_contextual(Store.locate(Path(sys.argv[1])))",
                        str(root)], cwd=root, env=env | ONE_THREAD, check=True, capture_output=True)
        row["contextual vectors (upkeep, one thread)"] = f"{time.perf_counter() - started:,.0f} s"
    return row


def ms(value: Time, bare: Time) -> str:
    """Wall ms (× the bare start's wall), then CPU ms (× its CPU) in brackets."""
    cpu = getattr(value, "cpu", 0.0)
    return f"{value:,.1f} ms ({value / bare:.2f}×) [cpu {cpu:,.0f} ms, {cpu / max(bare.cpu, 0.1):.1f}×]"


def unserved(python: str, root: Path, env: dict[str, str], runs: int, bare: float) -> dict[str, str]:
    cortex = console_script(python)
    row = {}
    stop_servers(root)
    row["list"] = ms(median([*cortex, "list"], root, env, runs), bare)
    row["status"] = ms(median([*cortex, "status"], root, env, runs), bare)
    row["show"] = ms(median([*cortex, "show", first_id(root)], root, env, runs), bare)
    row["recall"] = ms(median([*cortex, "recall", "why did we pick sqlite", "--no-global"], root, env, runs), bare)
    row["prompt, no server"] = ms(median([*cortex, "hook", "prompt"], root, env, runs, prompts(root)), bare)
    edits = iter(range(1000))

    def changed() -> None:  # a memory file added behind cortex's back (a pull with no git hook), no server
        time.sleep(1.0)  # the previous run started `cortex serve`: let it bind, then stop it
        stop_servers(root)
        write_by_hand(root, next(edits))

    row["SessionStart, memory changed behind cortex's back, no server"] = ms(
        median([*cortex, "hook", "session-start"], root, env, runs, hook_payload(root, "SessionStart", source="startup"),
               before=changed), bare)
    # That SessionStart printed the last briefing and started the server; the session's first prompt, a second
    # later (as a person types it), says what changed since (`events.briefing_catch_up`).
    caught = []
    for n in range(runs + 1):
        changed()
        session = hook_payload(root, "SessionStart", source="startup", session_id=f"catch-up-{n}")
        subprocess.run([*cortex, "hook", "session-start"], cwd=root, env=env, input=session.encode(),
                       capture_output=True, check=True)
        time.sleep(1.0)
        asked = json.loads(prompts(root)(n)) | {"session_id": f"catch-up-{n}"}
        caught.append(timed([*cortex, "hook", "prompt"], root, env, json.dumps(asked)))
    row["first prompt after it, with what changed"] = ms(median_of(caught[1:]), bare)
    commits = iter(range(1000))

    def committed() -> None:  # a commit (or a pull) moved HEAD, which the briefing names; no server
        time.sleep(1.0)
        stop_servers(root)
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", f"bench commit {next(commits)}"], cwd=root,
                       env=env, check=True)

    row["SessionStart, after a commit, no server"] = ms(
        median([*cortex, "hook", "session-start"], root, env, runs, hook_payload(root, "SessionStart", source="startup"),
               before=committed), bare)
    notes = iter(f"Bench rule {n}: the {n}th migration runs before the deploy" for n in range(1000))
    built: list[float] = []

    def remembered() -> None:  # `cortex remember` with no server: it starts the next briefing's build itself
        from cortex import __version__
        from cortex.layout import briefing_key, saved_briefing

        time.sleep(1.0)
        stop_servers(root)
        subprocess.run([*cortex, "remember", next(notes)], cwd=root, env=env, capture_output=True, check=True)
        store_root = str(root / ".cortex")
        started = time.time()
        while time.time() < started + 120 and (saved_briefing(store_root, "briefing.next.json") or {}).get("key") \
                != briefing_key(store_root, __version__):
            if time.time() > started + 30 and saved_briefing(store_root, "briefing.next.json") is None:
                return  # a cortex that does not build it ahead without a server (`--source` of an older tree)
            time.sleep(0.05)
        built.append(time.time() - started)

    row["SessionStart, after a remember, no server"] = ms(
        median([*cortex, "hook", "session-start"], root, env, runs, hook_payload(root, "SessionStart", source="startup"),
               before=remembered), bare)
    if built:
        row["briefing built ahead after a remember, no server"] = f"{statistics.median(built):,.1f} s"
    time.sleep(1.0)  # the last SessionStart started `cortex serve`: let it bind, then stop it (else it serves `remember`)
    stop_servers(root)
    texts = iter(f"Bench note {n}: the staging deploy needs the {n}th feature flag off" for n in range(1000))
    remember = []
    for _ in range(runs + 1):
        remember.append(timed([*cortex, "remember", next(texts)], root, env))
        settle(root)
    row["remember"] = ms(median_of(remember[1:]), bare)
    return row


def served(python: str, root: Path, env: dict[str, str], runs: int, bare: float) -> dict[str, str]:
    cortex = console_script(python)
    row = {}
    stop_servers(root)
    start = time.perf_counter()
    subprocess.Popen([*cortex, "serve", "--idle", "600"], cwd=root, env=env | ONE_THREAD, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    while ask(root, "state", 1) is None and time.perf_counter() - start < 120:
        time.sleep(0.01)
    answering = time.perf_counter() - start
    while ask(root, "ping", 1) is None and time.perf_counter() - start < 600:
        time.sleep(0.05)
    warm = time.perf_counter() - start
    # It answers once warm and builds the next briefing after: time that too, and wait for it (a session's
    # first prompt comes seconds after its start; the prompt rows below measure the server at rest).
    from cortex import __version__
    from cortex.layout import briefing_key, saved_briefing

    store_root = str(root / ".cortex")
    while time.perf_counter() - start < 600 and not any(
            (saved_briefing(store_root, name) or {}).get("key") == briefing_key(store_root, __version__)
            for name in ("briefing.json", "briefing.next.json")):
        time.sleep(0.05)
    # ... and the rest of its start-up's work beside the requests (the walk's changes put in, the columns
    # decoded, the link map): at 100,000 memories prompts sent during that second paid for it (~22 against
    # ~16 ms). A server that does not say (`--source` of an older tree) is taken as settled.
    while time.perf_counter() - start < 600 and not (ask(root, "state", 1) or {}).get("settled", True):
        time.sleep(0.05)
    row["server answering / warm"] = f"{answering * 1000:,.0f} ms / {warm:,.1f} s"
    row["server: next briefing built, settled"] = f"{time.perf_counter() - start:,.1f} s"
    row["prompt, served"] = ms(median([*cortex, "hook", "prompt"], root, env, runs, prompts(root)), bare)
    row["list, served"] = ms(median([*cortex, "list"], root, env, runs), bare)
    row["status, served"] = ms(median([*cortex, "status"], root, env, runs), bare)
    row["recall, served"] = ms(median([*cortex, "recall", "why did we pick sqlite", "--no-global"], root, env, runs),
                               bare)
    row["show, served"] = ms(median([*cortex, "show", first_id(root)], root, env, runs), bare)
    texts = iter(f"Served note {n}: the canary deploy waits for the {n}th health check" for n in range(1000))
    remember = []
    for _ in range(runs + 1):
        remember.append(timed([*cortex, "remember", next(texts)], root, env))
        settle(root)
    row["remember, served"] = ms(median_of(remember[1:]), bare)
    session = hook_payload(root, "SessionStart", source="startup")
    row["SessionStart, cached"] = ms(median([*cortex, "hook", "session-start"], root, env, runs, session), bare)
    edits = iter(range(1000, 2000))
    ready: list[float] = []

    def changed() -> None:  # a memory changed while the server runs: it rebuilds the briefing ahead
        from cortex import __version__
        from cortex.layout import briefing_key, saved_briefing

        touch_memory(root, next(edits))
        store_root = str(root / ".cortex")
        started = time.time()
        deadline = started + 60
        time.sleep(0.1)
        while time.time() < deadline and (saved_briefing(store_root, "briefing.next.json") or {}).get("key") \
                != briefing_key(store_root, __version__):
            if time.time() > started + 30 and saved_briefing(store_root, "briefing.next.json") is None:
                return  # a cortex that does not build the briefing ahead (`--source` of an older tree)
            time.sleep(0.05)
        ready.append(time.time() - started)

    row["SessionStart, memory changed, served"] = ms(
        median([*cortex, "hook", "session-start"], root, env, runs, session, before=changed), bare)
    if ready:  # the warm-up run included
        row["briefing rebuilt by the server after a change"] = f"{statistics.median(ready):,.1f} s"
    stop_servers(root)
    return row


def in_process(python: str, root: Path, env: dict[str, str]) -> str:
    out = subprocess.run([python, "-c", IN_PROCESS, str(root)], cwd=root, env=env | ONE_THREAD, check=True,
                         capture_output=True, text=True).stdout
    p50, p95 = json.loads(out.strip().splitlines()[-1])
    return f"{p50:.1f} / {p95:.1f} ms"


def stop_hook(python: str, root: Path, transcript: Path, env: dict[str, str], runs: int, bare: float) -> dict[str, str]:
    cold, warm = [], []
    for run in range(runs):
        copy = root.parent / f"{root.name}-stop-{run}"
        shutil.copytree(root, copy, symlinks=True)
        # A copy has new inodes and ctimes: git's index would re-hash every file; a real checkout's would not.
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=copy, env=env, capture_output=True)
        # The same for the pages' stamp (it keeps each page's inode): `project` finds them current.
        subprocess.run([python, "-m", "cortex", "project"], cwd=copy, env=env, capture_output=True)
        shutil.rmtree(copy / ".cortex" / "state", ignore_errors=True)
        (copy / ".cortex" / "state").mkdir()
        target = copy.parent / f"{copy.name}{transcript.suffix}"
        shutil.copy(transcript, target)
        payload = hook_payload(copy, "Stop", transcript_path=str(target), stop_hook_active="false")
        cold.append(timed([*console_script(python), "hook", "stop"], copy, env, payload))
        settle(copy)
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(TURN + "\n")
        warm.append(timed([*console_script(python), "hook", "stop"], copy, env, payload))
        settle(copy)
        shutil.rmtree(copy, ignore_errors=True)
    return {"Stop, cold": ms(median_of(cold), bare), "Stop, one more turn": ms(median_of(warm), bare)}


ROWS = ["prompt, served", "prompt, no server", "SessionStart, cached", "SessionStart, memory changed, served",
        "briefing rebuilt by the server after a change", "SessionStart, memory changed behind cortex's back, no server",
        "first prompt after it, with what changed", "SessionStart, after a commit, no server",
        "SessionStart, after a remember, no server",
        "briefing built ahead after a remember, no server", "recall", "recall, served", "list", "list, served", "status",
        "status, served", "show", "show, served", "remember", "remember, served", "Stop, cold", "Stop, one more turn", "recall in process p50 / p95",
        "reindex", "server answering / warm", "server: next briefing built, settled",
        "contextual vectors (upkeep, one thread)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--transcript", type=Path, default=None, help="a transcript for the Stop rows")
    parser.add_argument("--no-reindex", action="store_true", help="do not time `cortex reindex`")
    parser.add_argument("--stop-max", type=int, default=10_000, help="the Stop rows only up to this many memories")
    parser.add_argument("--source", type=Path, default=REPO,
                        help="the tree to install (e.g. `git archive` of an older commit, for a before/after table)")
    parser.add_argument("--contextual-from", type=Path, default=None, metavar="CACHE",
                        help="with one size: copy the contextual vectors from this cache folder (its cache.db) of an earlier run's store of that size "
                             "(the generator is seeded: same memories, same vectors) instead of filling them (~12 min "
                             "of one core at 10,000)")
    parser.add_argument("--no-contextual", action="store_true",
                        help="recall without the contextual re-ranking (`recall.contextual: false`)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    env = env_for()
    table: dict[int, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # detached upkeep may still write
        python = regular_install(Path(tmp) / "venv", args.source)
        bare = median([python, "-c", "pass"], Path(tmp), env, max(args.runs, 10))
        editable = median([sys.executable, "-c", "pass"], Path(tmp), env, max(args.runs, 10))
        print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
        print(f"python -c pass: regular install {bare:.1f} ms (cpu {bare.cpu:.1f} ms), editable install "
              f"{editable:.0f} ms (cpu {editable.cpu:.0f} ms)")
        if args.source != REPO:
            print(f"installed from {args.source}")
        if args.no_contextual:
            print("recall.contextual: false (re-ranking with the contextual model off)")
        for size in sizes:
            root = Path(tmp) / f"s{size}"
            row = make_project(root, size, python, env, not args.no_reindex, not args.no_contextual,
                               args.contextual_from)
            row.update(unserved(python, root, env, args.runs, bare))
            row.update(served(python, root, env, args.runs, bare))
            row["recall in process p50 / p95"] = in_process(python, root, env)
            if args.transcript and size <= args.stop_max:
                row.update(stop_hook(python, root, args.transcript, env, args.runs, bare))
            row["load average"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
            table[size] = row
            print(f"size {size:,} done (load {row['load average']})", file=sys.stderr, flush=True)
            shutil.rmtree(root, ignore_errors=True)
    print()
    print("| work | " + " | ".join(f"{size:,}" for size in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name in [*ROWS, "load average"]:
        if any(name in table[size] for size in sizes):
            print(f"| {name} | " + " | ".join(table[size].get(name, "—") for size in sizes) + " |")


if __name__ == "__main__":
    main()
