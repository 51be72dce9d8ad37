"""The layering in docs/architecture.md is the code's: no import cycle, no import upward, no long function."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "cortex"


def _modules() -> dict[str, Path]:
    """Dotted name (without the `cortex.` prefix; `cortex` for the package itself) → source file."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) or "cortex"] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every cortex module `name` imports, at any depth of the file (function-level imports included)."""
    if path.name == "__init__.py":
        package = name
    else:
        package = name.rsplit(".", 1)[0] if "." in name else "cortex"
    found = set()

    def local(dotted: str) -> str | None:
        if dotted == "cortex":
            return "cortex"
        if dotted.startswith("cortex."):
            short = dotted[len("cortex."):]
            return short if short in modules else None
        return None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [local(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ("cortex." + package if package != "cortex" else "cortex").split(".")  # the package's full name
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from cortex.index import fulltext` imports the submodule; `from cortex.store import Store` the module.
            targets = [local(f"{source}.{alias.name}") or local(source) for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t is not None and t != name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layers() -> dict[str, int]:
    """Module → layer number, from the table under "## Layers" in docs/architecture.md."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layer_of = {}
    for row in re.findall(r"^\| (\d+) [^|]*\| ([^|]*) \|", table, flags=re.M):
        for module in re.findall(r"`([a-z_.]+)`", row[1]):
            assert module not in layer_of, f"docs/architecture.md lists {module} twice"
            layer_of[module] = int(row[0])
    return layer_of


def test_every_module_has_a_documented_layer():
    layers = _layers()
    missing = sorted(set(_modules()) - set(layers))
    unknown = sorted(set(layers) - set(_modules()))
    assert not missing, f"modules missing from the layer table in docs/architecture.md: {missing}"
    assert not unknown, f"docs/architecture.md names modules that do not exist: {unknown}"


def test_no_import_goes_up_a_layer():
    layers = _layers()
    upward = sorted(f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]})"
                    for a, targets in _graph().items() for b in targets if layers[b] > layers[a])
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_reader_sees_function_level_and_relative_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from cortex.store import Store\n    from .index import fulltext\n", encoding="utf-8")
    modules = {"store": Path("store.py"), "index": Path("i.py"), "index.fulltext": Path("f.py"), "mod": source}
    assert _imports("mod", source, modules) == {"store", "index.fulltext"}


def test_hot_paths_import_only_the_standard_library():
    """What a cached SessionStart and a served prompt load: no third-party module, not the store or the index
    (`json` and `socket` are the standard's, used plainly: issue 38)."""
    import subprocess
    import sys

    def loaded(imports: str) -> set[str]:
        probe = (f"import sys{imports}\n"
                 "print(' '.join(sorted(m for m in sys.modules if m.startswith('cortex') or m.split('.')[0] in "
                 "{'numpy', 'whoosh', 'pygit2', 'ruamel', 'click', 'mcp', 'jinja2', 'pathlib', "
                 "'typing'})))")
        return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                  cwd=REPO_ROOT).stdout.split())

    before = loaded("")  # what Python's own start loads (an editable install's import hook loads pathlib, re)
    hot = loaded(", cortex.__main__, cortex.hotpath") - before
    assert hot == {"cortex", "cortex.__main__", "cortex.gitfacts", "cortex.hotpath", "cortex.layout", "cortex.text",
                   "cortex.wire"}, hot


def test_no_function_over_120_lines():
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 120:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, long
