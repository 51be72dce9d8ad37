"""`cortex index-code`: a prose description and the source of each file, linked `source_of`, kept in step."""

from __future__ import annotations

import json

from cortex.index import Index
from cortex.store import Store
from tests.helpers import commit_all, cortex, cortex_json, fake_claude, git

MODULE = '''"""Billing: invoice totals in integer cents."""


class Invoice:
    """One customer invoice."""

    def total(self):
        """Sum of the lines, in cents."""
        return sum(self.lines)


def refund(invoice, amount):
    """Refund part of an invoice through the provider."""
    return amount
'''


def test_index_code_writes_a_source_of_pair_that_recall_returns_together(project):
    (project / "src").mkdir()
    (project / "src" / "billing.py").write_text(MODULE, encoding="utf-8")
    (project / "src" / "app.ts").write_text("export function startServer(port: number) {\n  return port\n}\n",
                                            encoding="utf-8")
    (project / "build").mkdir()
    (project / "build" / "out.py").write_text("x = 1\n", encoding="utf-8")
    (project / ".gitignore").write_text("build/\n", encoding="utf-8")
    (project / "src" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", ".", cwd=project)
    paths = {item["path"]: item for item in report["indexed"]}
    assert set(paths) >= {"src/billing.py", "src/app.ts"} and "build/out.py" not in paths
    assert {"path": "src/logo.png", "reason": "binary"} in report["skipped"]
    store = Store.locate(project)
    item = paths["src/billing.py"]
    description, code = store.get(item["description"]), store.get(item["code"])
    assert description.type == "code_description" and code.type == "code"
    assert ("source_of", code.id) in [(link.rel, link.to) for link in description.links]
    assert "Billing: invoice totals in integer cents." in description.body
    assert "class `Invoice`: One customer invoice." in description.body
    assert "`refund(invoice, amount)`: Refund part of an invoice through the provider." in description.body
    assert MODULE in code.body
    assert "export function startServer(port: number)" in store.get(paths["src/app.ts"]["description"]).body
    hits = cortex_json("recall", "how are invoice refunds done", cwd=project)
    ids = [h["id"] for h in hits]
    assert description.id in ids and ids[ids.index(description.id) + 1] == code.id
    assert hits[ids.index(code.id)]["via"] == f"source_of of {description.id}"
    # code is never embedded
    index = Index(store)
    index.sync(full=False)
    assert all(entry.get("vhash") is None for entry in index.records().values() if entry["type"] == "code")
    # unchanged: nothing; changed: a new pair replaces the old one
    git(project, "add", "-A")  # index-code reads tracked files only
    again = cortex_json("index-code", "src", cwd=project)
    assert again["indexed"] == [] and set(again["unchanged"]) == {"src/billing.py", "src/app.ts"}
    (project / "src" / "billing.py").write_text(MODULE + "\n\ndef void(invoice):\n    return None\n", encoding="utf-8")
    git(project, "add", "-A")  # index-code reads tracked files only
    changed = cortex_json("index-code", "src/billing.py", cwd=project)
    assert [i["path"] for i in changed["indexed"]] == ["src/billing.py"]
    assert set(changed["replaced"]) == {item["description"], item["code"]}
    assert code.path is not None and description.path is not None
    assert not code.path.exists() and not description.path.exists()  # derived data: replaced, not kept beside
    # kept out of git: `git add -A` stages none of them (issue 39: no committed copy of the source)
    assert git(project, "ls-files", ".cortex/memories/code", ".cortex/memories/code_description").stdout == ""
    git(project, "add", "-A")  # index-code reads tracked files only
    forced = cortex_json("index-code", "src/app.ts", "--force", cwd=project)
    assert [i["path"] for i in forced["indexed"]] == ["src/app.ts"]


def test_index_code_skips_a_file_holding_a_secret(project):
    (project / "settings.py").write_text('AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYZ"\n',
                                         encoding="utf-8")
    commit_all(project, "settings")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", "settings.py", cwd=project)
    assert report["indexed"] == [] and "secret" in report["skipped"][0]["reason"]
    assert not list((project / ".cortex" / "memories").rglob("*.md"))


def test_index_code_of_a_folder_and_a_file_in_it_indexes_the_file_once(project):
    (project / "app.py").write_text('"""The app."""\n', encoding="utf-8")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", ".", "app.py", cwd=project)
    assert [i["path"] for i in report["indexed"]].count("app.py") == 1
    codes = [m for m in Store.locate(project).list(types=("code",)) if m.title.startswith("app.py")]
    assert len(codes) == 1


def test_each_language_gets_an_outline_of_what_it_declares(project):
    src = project / "src"
    src.mkdir()
    (src / "server.go").write_text("package main\n\nimport \"net/http\"\n\nfunc (s *Server) Serve(addr string) error {\n"
                                   "\treturn http.ListenAndServe(addr, s)\n}\n\nfunc helper() {}\n", encoding="utf-8")
    (src / "guide.md").write_text("# Deploying\n\nSome prose.\n\n## Rolling back\n\nMore prose.\n", encoding="utf-8")
    (src / "schema.sql").write_text("CREATE TABLE invoices (id integer primary key);\nSELECT 1;\n", encoding="utf-8")
    (src / "broken.py").write_text("def half(:\n    pass\n", encoding="utf-8")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", "src", cwd=project)
    store = Store.locate(project)
    body = {item["path"]: store.get(item["description"]).body for item in report["indexed"]}
    assert set(body) == {"src/server.go", "src/guide.md", "src/schema.sql", "src/broken.py"}
    assert body["src/server.go"].startswith("server.go: go, 9 lines.")
    assert "`func (s *Server) Serve(addr string) error`" in body["src/server.go"]
    assert "`func helper() {}`" in body["src/server.go"] and "ListenAndServe" not in body["src/server.go"]
    assert "# Deploying" in body["src/guide.md"] and "## Rolling back" in body["src/guide.md"]
    assert "Some prose" not in body["src/guide.md"]
    assert "CREATE TABLE invoices" in body["src/schema.sql"] and "SELECT 1" not in body["src/schema.sql"]
    assert "Python that does not parse: line 1" in body["src/broken.py"]  # described, not refused
    code = store.get(next(i["code"] for i in report["indexed"] if i["path"] == "src/server.go"))
    assert code.body.startswith("```go\npackage main\n")
    assert code.source["sha"] == git(project, "hash-object", "src/server.go").stdout.strip()  # git's own blob id


def test_large_binary_and_non_utf8_files_are_skipped_and_named(project):
    (project / "big.txt").write_text("x" * 200_001, encoding="utf-8")
    (project / "latin1.txt").write_bytes("café crème\n".encode("latin-1"))
    (project / "blob.bin").write_bytes(b"\0\1\2" * 10)
    git(project, "add", "-A")  # index-code reads tracked files only
    out = cortex("index-code", "big.txt", "latin1.txt", "blob.bin", cwd=project).stdout.splitlines()
    assert out == ["skipped big.txt: over 200 kB", "skipped latin1.txt: not UTF-8 text", "skipped blob.bin: binary"]
    assert not list((project / ".cortex" / "memories").rglob("*.md"))


def test_a_source_file_holding_a_code_fence_keeps_its_fence_intact(project):
    text = "# Notes\n\n```sh\nmake test\n```\n"
    (project / "notes.md").write_text(text, encoding="utf-8")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", "notes.md", cwd=project)
    code = Store.locate(project).get(report["indexed"][0]["code"])
    assert code.body == f"````markdown\n{text}````\n"  # a longer fence: the file's own ``` does not end the block


FAKE_LLM = """
import json, os, sys
prompt = sys.stdin.read()
with open({log!r}, "a") as handle:
    handle.write(json.dumps({{"argv": sys.argv[1:], "nested": os.environ.get("CORTEX_NESTED"),
                              "names_the_file": "billing.py" in prompt}}) + "\\n")
print("The billing module: invoice totals in cents and partial refunds.")
"""


def test_with_the_llm_configured_the_description_is_its_summary(project, tmp_path):
    log = tmp_path / "llm.jsonl"
    env = fake_claude(tmp_path / "bin", FAKE_LLM.format(log=str(log))) | {"CORTEX_LLM": "on"}  # allowed here
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: auto"), encoding="utf-8")
    (project / "billing.py").write_text(MODULE, encoding="utf-8")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", "billing.py", cwd=project, env=env)
    description = Store.locate(project).get(report["indexed"][0]["description"])
    assert description.body == "The billing module: invoice totals in cents and partial refunds.\n"
    assert description.title == "billing.py: The billing module: invoice totals in cents and partial refunds."
    [call] = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert call["nested"] == "1" and "--settings" in call["argv"] and call["names_the_file"]  # its hooks off


def test_only_source_files_of_a_folder_are_indexed_with_readable_titles_and_no_repeats(project):
    """Markers and dotfiles are not code; an overloaded function is listed once; titles say what a file does."""
    pkg = project / "pkg"
    pkg.mkdir()
    (pkg / "py.typed").write_text("", encoding="utf-8")
    (pkg / ".gitignore").write_text("*.pyc\n", encoding="utf-8")
    (pkg / "utils.py").write_text(
        "from typing import overload\n\n@overload\ndef parse(x: int) -> int: ...\n@overload\n"
        "def parse(x: str) -> str: ...\ndef parse(x):\n    return x\n\ndef _posixify(name):\n    return name\n",
        encoding="utf-8")
    (pkg / "billing.py").write_text(MODULE, encoding="utf-8")
    git(project, "add", "-A")  # index-code reads tracked files only
    report = cortex_json("index-code", "pkg", cwd=project)
    assert {item["path"] for item in report["indexed"]} == {"pkg/utils.py", "pkg/billing.py"}
    assert {"path": "pkg/py.typed", "reason": "not a source file"} in report["skipped"]
    store = Store.locate(project)
    titles = {item.files[0]: item for item in store.list(types=("code_description",))}
    assert titles["pkg/billing.py"].title == "pkg/billing.py: Billing: invoice totals in integer cents."
    assert titles["pkg/utils.py"].title == "pkg/utils.py: defines parse"
    assert "`" not in titles["pkg/utils.py"].title
    assert titles["pkg/utils.py"].body.count("parse(") == 1
