"""`cortex review BASE..HEAD`: a branch's memory changes as a pull-request comment, and posting it.

Real git repositories (pygit2 and the git CLI), memories committed on a base and a pull-request branch, the
real `cortex` command; the comment endpoint is a real HTTP server on loopback standing in for GitHub's and
GitLab's APIs (the one part that cannot run here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

import pygit2
import pytest

from cortex.memory import Link, Memory, render_new
from cortex.review import MARKER
from cortex.store import Store
from tests.helpers import REPO_ROOT, commit_all, cortex, git, remember

TOKEN = "test-token-not-a-secret"


def _save(project: Path, text: str, memory_type: str, **fields: Any) -> str:
    return remember(project, text, type=memory_type, link=False, **fields).id


@pytest.fixture
def pr_repo(project: Path) -> dict[str, Any]:
    """A repository with memories on main and a pull-request branch `feature` that changes them every way a
    reviewer cares about; main moves on after the fork (a decision the review must not show)."""
    (project / "src").mkdir()
    (project / "src" / "legacy_sync.py").write_text("def sync():\n    pass\n", encoding="utf-8")
    ids: dict[str, Any] = {"project": project}
    ids["kept"] = _save(project, "Keep sessions in Postgres; sessions expire after 30 minutes of inactivity.\n\n"
                        "Rejected: Redis sessions (one more service to run).", "decision", title="Keep sessions in Postgres")
    ids["celery"] = _save(project, "Background jobs run on Celery with RabbitMQ as the broker.", "decision",
                          title="Run background jobs on Celery")
    ids["ansible"] = _save(project, "Deploy with Ansible playbooks from a laptop.", "decision",
                           title="Deploy with Ansible playbooks")
    ids["legacy"] = _save(project, "The legacy sync must run before the nightly export or totals are off.", "gotcha",
                          title="Run the legacy sync before the export", files=["src/legacy_sync.py"])
    ids["plan"] = _save(project, "Goal: rate limits on every endpoint.\n- [ ] token bucket\n- [ ] middleware", "plan",
                        title="Plan: roll out API rate limits")
    ids["lint"] = _save(project, "Lint with flake8.", "decision", title="Lint with one tool")
    commit_all(project, "base: memories on main")
    git(project, "checkout", "-q", "-b", "feature")
    store = Store.locate(project)
    ids["arq"] = _save(project, "Move background jobs from Celery to arq on the Redis we already run: our task code "
                       "is async and Celery wrapped every task in asyncio.run.\n\nRejected: Celery with gevent "
                       "(fought aiosqlite), Dramatiq (no asyncio).", "decision",
                       title="Replace Celery with arq")
    store.supersede(ids["celery"], ids["arq"])
    store.archive(ids["ansible"])
    store.update(ids["lint"], {}, body="Lint with ruff: one tool for lint and format, 50x faster.\n\nRejected: flake8.\n")
    ids["conflict"] = _save(project, "Sessions stay in Postgres, and sessions expire after 15 minutes of inactivity.",
                            "decision", title="Shorter sessions in Postgres")
    ids["gotcha"] = _save(project, "Redis rejects writes with OOM when rate-limit keys have no TTL; set EXPIRE.",
                          "gotcha", title="Redis OOM: rate-limit keys need a TTL")
    ids["pattern"] = _save(project, "Every write goes through db.tx(), which issues BEGIN IMMEDIATE.", "pattern",
                           title="Writes go through db.tx()")
    ids["progress"] = _save(project, "Token bucket script and middleware done, tests green.", "progress",
                            title="Rate limits: bucket and middleware done")
    store.update(ids["plan"], {}, body="Goal: rate limits on every endpoint.\n- [x] token bucket\n- [ ] middleware\n")
    (project / "src" / "legacy_sync.py").unlink()
    # A memory file written by hand, past the guard that `cortex remember` would have applied.
    leaked = Memory(id="5ec2e7a11ea5", type="context", title="Staging deploy notes", body="Deploys use the bot.\n",
                    created="2026-11-20T10:00:00Z", updated="2026-11-20T10:00:00Z")
    text = render_new(leaked).replace("Deploys use the bot.", "Deploys use the bot.\nbot token: ghp_"
                                      + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
    (store.memories_dir / "context").mkdir(exist_ok=True)
    (store.memories_dir / "context" / "staging-deploy-notes-5ec2e7a11ea5.md").write_text(text, encoding="utf-8")
    commit_all(project, "feature: arq, shorter sessions, legacy sync removed")
    git(project, "checkout", "-q", "main")
    ids["after_fork"] = _save(project, "Use uv to manage environments.", "decision", title="Use uv for environments")
    commit_all(project, "main moves on")
    git(project, "checkout", "-q", "feature")
    return ids


def test_review_gives_a_reviewer_every_change_and_warning(pr_repo):
    project = pr_repo["project"]
    text = cortex("review", "main..feature", cwd=project).stdout
    assert text.startswith(MARKER + "\n")
    decisions = text.split("#### Decisions", 1)[1].split("\n#### ", 1)[0]
    added = decisions.split("**Added**", 1)[1].split("\n**", 1)[0]
    assert "**Replace Celery with arq**" in added and "replaces ~~Run background jobs on Celery~~" in added
    assert "Why: Move background jobs from Celery to arq" in added
    assert "Rejected: Celery with gevent (fought aiosqlite), Dramatiq (no asyncio)" in added
    superseded = decisions.split("**Superseded**", 1)[1]
    assert f"~~Run background jobs on Celery~~ (`{pr_repo['celery']}`) → replaced by **Replace Celery with arq**" \
        in superseded
    changed = decisions.split("**Changed**", 1)[1].split("\n**", 1)[0]
    assert f"**Lint with one tool** (`{pr_repo['lint']}`) — changed: body" in changed
    assert "Why: Lint with ruff: one tool for lint and format, 50x faster." in changed and "Rejected: flake8" in changed
    assert f"~~Deploy with Ansible playbooks~~ (`{pr_repo['ansible']}`)" in decisions.split("**Archived**", 1)[1]
    assert "Keep sessions in Postgres**" not in decisions  # unchanged: not in the review
    assert "Use uv" not in text  # made on main after the fork: not this branch's change
    assert "#### New gotchas\n- **Redis OOM: rate\\-limit keys need a TTL**" not in text  # '-' is not escaped
    assert "#### New gotchas\n- **Redis OOM: rate-limit keys need a TTL**" in text
    assert "#### New conventions\n- **Writes go through db.tx()**" in text
    plan = text.split("#### Plan", 1)[1]
    assert f"Plan updated: **Plan: roll out API rate limits** (`{pr_repo['plan']}`)" in plan
    assert "1 progress note: Rate limits: bucket and middleware done" in plan
    warnings = text.split("#### ⚠️ Warnings", 1)[1].split("\n#### ", 1)[0]
    assert re.search(r"\*\*Contradiction:\*\* \*\*Shorter sessions in Postgres\*\* .* vs the active \*\*Keep "
                     r"sessions in Postgres\*\* .*: number: 15 minutes vs 30 minutes", warnings)
    assert (f"**Deleted file:** **Run the legacy sync before the export** (`{pr_repo['legacy']}`) names "
            "`src/legacy_sync.py`, which this branch deletes") in warnings
    assert ("**Possible secret** (GitHub token) in `.cortex/memories/context/staging-deploy-notes-5ec2e7a11ea5.md` "
            "line") in warnings
    assert "ghp_" not in text  # the finding, never the secret
    summary = text.split("\n", 4)[3]
    assert summary == "**decisions: 2 added, 1 changed, 1 superseded, 1 archived · 1 new gotcha · 1 new convention · plan changed · ⚠️ 3 warnings**"
    assert len(text) < 6000


def test_review_json_has_everything_and_strict_fails_on_warnings(pr_repo):
    project = pr_repo["project"]
    result = cortex("review", "main...feature", "--json", cwd=project)
    report = json.loads(result.stdout)
    head = git(project, "rev-parse", "feature").stdout.strip()
    fork = git(project, "merge-base", "main", "feature").stdout.strip()
    assert (report["head"], report["merge_base"], report["store"]) == (head, fork, ".cortex")
    by_kind = {kind: [row["id"] for row in rows] for kind, rows in report["decisions"].items()}
    assert by_kind == {"added": sorted([pr_repo["arq"], pr_repo["conflict"]],
                                       key=lambda i: {pr_repo["arq"]: "replace", pr_repo["conflict"]: "shorter"}[i]),
                       "changed": [pr_repo["lint"]], "superseded": [pr_repo["celery"]], "archived": [pr_repo["ansible"]], "removed": []}
    arq = report["decisions"]["added"][0]
    assert arq["rejected"] == ["Celery with gevent (fought aiosqlite), Dramatiq (no asyncio)"]
    assert arq["supersedes"] == [{"id": pr_repo["celery"], "title": "Run background jobs on Celery"}]
    assert report["decisions"]["superseded"][0]["superseded_by"][0]["id"] == pr_repo["arq"]
    assert [row["id"] for row in report["plan"]["changed"]] == [pr_repo["plan"]]
    assert report["plan"]["changed"][0]["fields"] == ["body"]
    assert report["other"] == {"added": {"context": 1}}
    kinds = sorted(w["kind"] for w in report["warnings"])
    assert kinds == ["contradiction", "deleted-file", "secret"]
    secret = next(w for w in report["warnings"] if w["kind"] == "secret")
    assert secret["line"] > 1 and "ghp_" not in result.stdout
    strict = cortex("review", "main..feature", "--strict", cwd=project, check=False)
    assert strict.returncode == 1 and strict.stdout.startswith(MARKER)
    clean = cortex("review", "feature~1..feature~1", "--strict", cwd=project, check=False)
    assert clean.returncode == 0 and "No memory in `.cortex` changed" in clean.stdout


def test_a_contradicts_link_and_an_unreadable_memory_are_warnings(project):
    kept = _save(project, "Tabs for indentation in Makefiles only.", "decision", title="Indentation")
    commit_all(project, "base")
    git(project, "checkout", "-q", "-b", "pr")
    store = Store.locate(project)
    other = _save(project, "Use two spaces everywhere, Makefiles included.", "pattern", title="Two spaces")
    store.update(other, {"links": [Link("contradicts", kept).as_dict()]})
    (store.memories_dir / "gotcha").mkdir(exist_ok=True)
    (store.memories_dir / "gotcha" / "broken-0123456789ab.md").write_text("---\nid: 0123456789ab\ntitle: [\n---\n",
                                                                          encoding="utf-8")
    commit_all(project, "pr")
    report = json.loads(cortex("review", "main..pr", "--json", cwd=project).stdout)
    assert {(w["kind"], w.get("id"), w.get("other", {}).get("id")) for w in report["warnings"]} == {
        ("contradiction", other, kept), ("malformed", None, None)}
    text = cortex("review", "main..pr", cwd=project).stdout
    assert "vs the active **Indentation**" in text and ": a contradicts link." in text
    assert "**Unreadable memory:** `.cortex/memories/gotcha/broken-0123456789ab.md`: front matter" in text


def test_long_reviews_are_capped_and_titles_cannot_inject_markdown(project):
    commit_all(project, "base")
    git(project, "checkout", "-q", "-b", "big")
    for n in range(12):
        _save(project, f"Gotcha number {n}: something surprising about subsystem {n}.", "gotcha",
              title=f"Surprise {n:02d} in subsystem")
    _save(project, "x", "decision", title="<!-- cortex-review --> @octocat [click](https://evil.example) | ![i](x)")
    commit_all(project, "many gotchas")
    text = cortex("review", "main..big", cwd=project).stdout
    gotchas = text.split("#### New gotchas", 1)[1].split("\n\n", 1)[0]
    assert gotchas.count("\n- **Surprise") == 5 and "- …and 7 more (`cortex review --json` lists all)" in gotchas
    assert text.count(MARKER) == 1 and "@octocat" not in text and "@\u200boctocat" in text
    assert "\\[click\\](https://evil.example) \\| !\\[i\\](x)" in text  # brackets shown, not a link or image
    assert "\\<\\!-- cortex-review --\\>" not in text and "&lt;" not in text  # shown as text, escaped
    assert len(json.loads(cortex("review", "main..big", "--json", cwd=project).stdout)["gotchas"]) == 12
    more = cortex("review", "main..big", "--limit", "20", cwd=project).stdout
    assert "and 7 more" not in more and "Surprise 11" in more


def test_bad_ranges_are_one_line_errors(project):
    commit_all(project, "base")
    for args, message in ((["..HEAD"], "give a revision range as BASE..HEAD"),
                          (["nope..HEAD"], "unknown revision 'nope'")):
        result = cortex("review", *args, cwd=project, check=False)
        assert result.returncode == 1 and message in result.stderr and len(result.stderr.splitlines()) == 1
    assert "No memory in `.cortex` changed" in cortex("review", "HEAD", cwd=project).stdout


# ---------------------------------------------------------------- posting, against a loopback endpoint


class _Forge:
    """A comment API on loopback: GitHub's issue comments and GitLab's merge-request notes, in memory."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.threads: dict[str, list[dict[str, Any]]] = {}
        self.next_id = 1000
        # Who the token posts as: a workflow's GITHUB_TOKEN is github-actions[bot] and may not read GET /user
        # (403, as GitHub answers it); set `github_login` to act as a personal token, which may.
        self.github_login: str | None = None
        self.gitlab_user = {"id": 77, "username": "project_42_bot"}
        forge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urlparse(self.path)
                forge.requests.append({"method": self.command, "path": url.path, "query": parse_qs(url.query),
                                       "headers": dict(self.headers), "body": body})
                code, data = forge.route(self.command, url.path, parse_qs(url.query), dict(self.headers), body)
                self._answer(code, data)

            do_GET = do_POST = do_PATCH = do_PUT = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
              body: Any) -> tuple[int, Any]:
        headers = {name.lower(): value for name, value in headers.items()}
        if headers.get("authorization") != f"Bearer {TOKEN}" and headers.get("private-token") != TOKEN:
            return 401, {"message": "Bad credentials"}
        github = re.fullmatch(r"/repos/acme/shop/issues/(\d+)/comments", path)
        gitlab = re.fullmatch(r"/api/v4/projects/42/merge_requests/(\d+)/notes", path)
        thread = path if github or gitlab else None
        if method == "GET" and path == "/user":
            if self.github_login is None:
                return 403, {"message": "Resource not accessible by integration"}
            return 200, {"login": self.github_login, "id": 5}
        if method == "GET" and path == "/api/v4/user":
            return 200, self.gitlab_user
        if thread and method == "GET":
            page, per_page = int(query["page"][0]), int(query["per_page"][0])
            return 200, self.threads.get(thread, [])[(page - 1) * per_page: page * per_page]
        if thread and method == "POST":
            self.next_id += 1
            comment = {"id": self.next_id, "body": body["body"], "html_url": f"{self.url}/comment/{self.next_id}"}
            if github:
                comment["user"] = {"login": self.github_login or "github-actions[bot]", "type": "Bot"}
            else:
                comment["author"] = dict(self.gitlab_user)
            self.threads.setdefault(thread, []).append(comment)
            return 201, comment
        one = re.fullmatch(r"/repos/acme/shop/issues/comments/(\d+)", path) if method == "PATCH" else \
            re.fullmatch(r"(/api/v4/projects/42/merge_requests/\d+/notes)/(\d+)", path) if method == "PUT" else None
        if one:
            wanted = int(one.groups()[-1])
            for comment in (c for comments in self.threads.values() for c in comments):
                if comment["id"] == wanted:
                    comment["body"] = body["body"]
                    return 200, comment
        return 404, {"message": "Not Found"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def forge() -> Iterator[_Forge]:
    server = _Forge()
    yield server
    server.close()


def _github_env(forge: _Forge, tmp_path: Path, number: int = 7) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": number, "pull_request": {"number": number}}),
                     encoding="utf-8")
    return {"GITHUB_ACTIONS": "true", "GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": "acme/shop",
            "GITHUB_EVENT_PATH": str(event), "GITHUB_API_URL": forge.url}


def test_post_creates_one_comment_then_updates_it(pr_repo, forge, tmp_path):
    project = pr_repo["project"]
    thread = "/repos/acme/shop/issues/7/comments"
    forge.threads[thread] = [{"id": n, "body": f"a person's comment {n}"} for n in range(100)]  # ours lands on page 2
    env = _github_env(forge, tmp_path)
    first = cortex("review", "main..feature", "--post", cwd=project, env=env)
    assert first.stderr.strip() == f"cortex: review comment created {forge.url}/comment/1001"
    assert [(r["method"], r["path"]) for r in forge.requests] == [("GET", thread), ("GET", thread), ("POST", thread)]
    posted = forge.requests[-1]
    assert posted["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert posted["headers"]["Accept"] == "application/vnd.github+json"
    assert posted["body"]["body"] == first.stdout and "Replace Celery with arq" in first.stdout

    _save(project, "Idempotency keys live for 24 hours.", "gotcha", title="Idempotency keys expire after a day")
    commit_all(project, "one more gotcha")
    forge.requests.clear()
    second = cortex("review", "main..feature", "--post", cwd=project, env=env)
    assert second.stderr.strip() == f"cortex: review comment updated {forge.url}/comment/1001"
    assert [(r["method"], r["path"]) for r in forge.requests][-1] == ("PATCH", "/repos/acme/shop/issues/comments/1001")
    ours = [c for c in forge.threads[thread] if c["body"].startswith(MARKER)]
    assert len(ours) == 1 and "Idempotency keys expire after a day" in ours[0]["body"]
    assert len(forge.threads[thread]) == 101 and forge.threads[thread][0]["body"] == "a person's comment 0"

    forge.requests.clear()
    third = cortex("review", "main..feature", "--post", cwd=project, env=env)
    assert "review comment unchanged" in third.stderr and all(r["method"] == "GET" for r in forge.requests)


def test_post_skips_an_empty_review_and_reports_refusals_in_one_line(project, forge, tmp_path):
    commit_all(project, "base")
    env = _github_env(forge, tmp_path, number=9)
    quiet = cortex("review", "HEAD..HEAD", "--post", cwd=project, env=env)
    assert "skipped (nothing to say)" in quiet.stderr and not forge.threads
    refused = cortex("review", "HEAD..HEAD", "--post", cwd=project, env=env | {"GITHUB_TOKEN": "wrong"}, check=False)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1
    assert "HTTP 401 Bad credentials (the workflow needs permissions: pull-requests: write)" in refused.stderr
    assert "wrong" not in refused.stderr
    missing = cortex("review", "HEAD..HEAD", "--post", cwd=project, env={**env, "GITHUB_TOKEN": ""}, check=False)
    assert missing.returncode == 1 and "--post needs GITHUB_TOKEN" in missing.stderr
    event = tmp_path / "push.json"
    event.write_text(json.dumps({"ref": "refs/heads/main"}), encoding="utf-8")
    push = cortex("review", "HEAD..HEAD", "--post", cwd=project, env={**env, "GITHUB_EVENT_PATH": str(event)},
                  check=False)
    assert push.returncode == 1 and "not a pull request event" in push.stderr


def test_post_to_a_gitlab_merge_request(pr_repo, forge):
    project = pr_repo["project"]
    env = {"GITLAB_CI": "true", "GITHUB_ACTIONS": "", "CORTEX_GITLAB_TOKEN": TOKEN, "CI_API_V4_URL": f"{forge.url}/api/v4",
           "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "3"}
    notes = "/api/v4/projects/42/merge_requests/3/notes"
    cortex("review", "main..feature", "--post", cwd=project, env=env)
    cortex("review", "main..feature~1", "--post", cwd=project, env=env)
    assert [(r["method"], r["path"]) for r in forge.requests if r["method"] != "GET"] == [
        ("POST", notes), ("PUT", f"{notes}/1001")]
    assert {k.lower(): v for k, v in forge.requests[-1]["headers"].items()}["private-token"] == TOKEN
    assert len(forge.threads[notes]) == 1


# ---------------------------------------------------------------- the GitHub Action


def _action() -> dict[str, Any]:
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load((REPO_ROOT / "action.yml").read_text(encoding="utf-8"))


def _evaluate(value: str, inputs: dict[str, str]) -> str:
    """The `${{ inputs.NAME }}` expressions of a step's env, as the runner fills them in."""
    return re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: inputs[m.group(1)], str(value))


def test_action_is_composite_and_installs_cortex_from_its_own_path():
    action = _action()
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    assert steps[0]["uses"].startswith("actions/setup-python@")
    assert steps[0]["with"]["python-version"] == "${{ inputs.python-version }}"
    assert '"$GITHUB_ACTION_PATH"' in steps[1]["run"] and "pip install" in steps[1]["run"]
    for step in steps:
        assert "${{" not in step.get("run", ""), "inputs reach scripts through env, never spliced into them"
    assert action["inputs"]["base"]["default"] == "${{ github.event.pull_request.base.sha }}"


def test_action_script_posts_then_updates_one_comment_end_to_end(pr_repo, forge, tmp_path):
    """The Action's review step, run by bash as the runner runs it, against a real repository and the
    loopback endpoint: the first push creates the comment, the next updates it, the job summary gets it."""
    project = pr_repo["project"]
    step = next(s for s in _action()["runs"]["steps"] if s.get("id") == "review")
    base = git(project, "rev-parse", "main").stdout.strip()
    inputs = {name: str(spec.get("default", "")) for name, spec in _action()["inputs"].items()}
    inputs |= {"base": base, "token": TOKEN}
    runner = tmp_path / "runner"
    runner.mkdir()
    env = {**os.environ, **_github_env(forge, tmp_path), "RUNNER_TEMP": str(runner),
           "GITHUB_STEP_SUMMARY": str(runner / "summary.md"), "GITHUB_OUTPUT": str(runner / "output"),
           "PATH": f"{Path(REPO_ROOT / '.venv' / 'bin')}:{os.environ['PATH']}"}
    env |= {name: _evaluate(value, inputs) for name, value in step["env"].items()}

    def run_step() -> subprocess.CompletedProcess[str]:
        # `shell: bash` in a composite action runs `bash --noprofile --norc -eo pipefail {0}`
        script = runner / "step.sh"
        script.write_text(step["run"], encoding="utf-8")
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=project,
                              env=env, capture_output=True, text=True, timeout=120)

    first = run_step()
    assert first.returncode == 0, first.stderr
    thread = forge.threads["/repos/acme/shop/issues/7/comments"]
    assert len(thread) == 1 and thread[0]["body"].startswith(MARKER)
    assert "**Superseded**" in thread[0]["body"] and "Possible secret" in thread[0]["body"]
    assert (runner / "summary.md").read_text(encoding="utf-8") == thread[0]["body"]
    assert (runner / "output").read_text(encoding="utf-8") == f"review-file={runner / 'cortex-review.md'}\n"

    Store.locate(project).archive(pr_repo["gotcha"])
    commit_all(project, "that gotcha was wrong")
    second = run_step()
    assert second.returncode == 0, second.stderr
    assert len(thread) == 1 and "Redis OOM" not in thread[0]["body"].split("#### New gotchas")[-1]
    assert [r["method"] for r in forge.requests if r["method"] != "GET"] == ["POST", "PATCH"]

    env["CORTEX_REVIEW_STRICT"] = "true"
    strict = run_step()
    assert strict.returncode == 1 and len(thread) == 1  # warnings fail the step; the comment is still current

    env["CORTEX_REVIEW_BASE"] = ""
    assert "no base revision" in run_step().stderr


# ---------------------------------------------------------------- this repository's own history


def _first_commit_touching(repo: pygit2.Repository, prefix: str) -> pygit2.Commit | None:
    found = None
    for commit in repo.walk(repo.head.target, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME):
        try:
            commit.tree[prefix]
        except KeyError:
            continue
        if not commit.parents:
            return commit
        try:
            commit.parents[0].tree[prefix]
        except KeyError:
            found = commit
    return found


def test_review_of_this_repositorys_own_history():
    recent = cortex("review", "HEAD~3..HEAD", cwd=REPO_ROOT)
    assert recent.stdout.startswith(MARKER + "\n### ") and "Traceback" not in recent.stderr
    assert "No cortex store at `.cortex` in `" in recent.stdout or "No memory in `.cortex` changed" in recent.stdout \
        or "#### " in recent.stdout
    assert "No cortex store at `.nowhere`" in cortex("review", "HEAD~1..HEAD", "--dir", ".nowhere", cwd=REPO_ROOT).stdout
    repo = pygit2.Repository(str(REPO_ROOT))
    introduced = _first_commit_touching(repo, ".cortex-example/memories")
    assert introduced is not None and introduced.parents
    since = str(introduced.parents[0].id)
    text = cortex("review", f"{since}..HEAD", "--dir", ".cortex-example", cwd=REPO_ROOT).stdout
    assert "#### Decisions" in text and "**Replace Celery and RabbitMQ with arq on the Redis we already run**" in text
    assert "superseded in this branch, replaced by **Replace Celery and RabbitMQ" in text
    assert "#### New gotchas" in text and "#### Plan" in text
    short = cortex("review", f"{since}..HEAD", "--dir", ".cortex-example", "--limit", "3", cwd=REPO_ROOT).stdout
    assert re.search(r"#### New gotchas\n(- \*\*.*\n){3}- …and 2 more", short)
    assert len(text) < 10_000
    report = json.loads(cortex("review", f"{since}..HEAD", "--dir", ".cortex-example", "--json", cwd=REPO_ROOT).stdout)
    assert report["store"] == ".cortex-example" and len(report["decisions"]["added"]) >= 5


def test_the_gitlab_ci_job_in_the_docs_posts_a_merge_request_note(pr_repo, forge, tmp_path):
    """docs/review.md's GitLab job, its script run by bash (all but the pip install: cortex is installed here)
    in a clone of the repository with a remote, as GitLab's runner would, against the loopback endpoint."""
    from ruamel.yaml import YAML

    from tests.helpers import add_bare_remote

    doc = (REPO_ROOT / "docs" / "review.md").read_text(encoding="utf-8")
    block = doc.split("## GitLab CI", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    job = YAML(typ="safe", pure=True).load(block)["cortex-review"]
    script = [line for line in job["script"] if not line.startswith("pip install")]
    project = pr_repo["project"]
    add_bare_remote(project, tmp_path)
    git(project, "push", "-q", "origin", "main", "feature")
    env = {**os.environ, "GITLAB_CI": "true", "CORTEX_GITLAB_TOKEN": TOKEN, "CI_API_V4_URL": f"{forge.url}/api/v4",
           "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "3", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
           "CI_COMMIT_SHA": git(project, "rev-parse", "feature").stdout.strip(), "CI_PIPELINE_SOURCE": "merge_request_event",
           "PATH": f"{REPO_ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    env.pop("GITHUB_ACTIONS", None)
    result = subprocess.run(["bash", "-eo", "pipefail", "-c", "\n".join(script)], cwd=project, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    notes = forge.threads["/api/v4/projects/42/merge_requests/3/notes"]
    assert len(notes) == 1 and notes[0]["body"].startswith(MARKER) and "Replace Celery with arq" in notes[0]["body"]


def test_the_workflow_in_the_docs_uses_the_action_with_its_inputs():
    from ruamel.yaml import YAML

    doc = (REPO_ROOT / "docs" / "review.md").read_text(encoding="utf-8")
    workflow = YAML(typ="safe", pure=True).load(doc.split("## GitHub Action", 1)[1].split("```yaml\n", 1)[1]
                                                .split("```", 1)[0])
    steps = workflow["jobs"]["memory"]["steps"]
    assert workflow["permissions"]["pull-requests"] == "write" and steps[0]["with"]["fetch-depth"] == 0
    assert steps[1]["uses"].endswith("/cortex@main")
    named = re.findall(r"^\s+#\s+([\w-]+): ", doc.split("## GitHub Action", 1)[1].split("```", 2)[1], flags=re.M)
    assert named and set(named) <= set(_action()["inputs"])


def test_a_renamed_file_is_named_with_where_it_went(project):
    (project / "billing.py").write_text("def charge(amount):\n    return amount * 100\n" * 5, encoding="utf-8")
    (project / "docs").mkdir()
    (project / "docs" / "ops.md").write_text("# runbook\n", encoding="utf-8")
    charge = _save(project, "charge() takes minor units.", "gotcha", title="charge() takes minor units",
                   files=["billing.py"])
    runbook = _save(project, "The runbook lives in docs/.", "context", title="Runbook folder", files=["docs/"])
    kept = _save(project, "The app entry point.", "context", title="Entry point", files=["app.py"])
    commit_all(project, "base")
    git(project, "checkout", "-q", "-b", "move")
    git(project, "mv", "billing.py", "payments.py")
    git(project, "rm", "-q", "-r", "docs")
    git(project, "commit", "-q", "-m", "rename billing, drop docs")
    report = json.loads(cortex("review", "main..move", "--json", cwd=project).stdout)
    warned = {w["id"]: w for w in report["warnings"] if w["kind"] == "deleted-file"}
    assert set(warned) == {charge, runbook} and kept not in warned
    assert warned[charge]["moved_to"] == {"billing.py": "payments.py"} and warned[runbook]["files"] == ["docs"]
    text = cortex("review", "main..move", cwd=project).stdout
    assert "names `billing.py` (moved to `payments.py`), which this branch deletes" in text
