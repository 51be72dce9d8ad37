"""The built package carries the model and the templates: a wheel, installed apart from this checkout, recalls offline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import EXAMPLE_STORE, REPO_ROOT


@pytest.mark.long
def test_installed_wheel_recalls_offline_with_the_bundled_model(tmp_path):
    source = tmp_path / "source"  # build from a copy: a build must not write into the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    for name in ("cortex", "templates"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"cortex/models/minilm-l6-static/model.safetensors", "cortex/models/minilm-l6-static/tokenizer.json",
            "cortex/templates/decisions.md.j2"} <= names
    assert not any("__pycache__" in name for name in names)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    store = tmp_path / "example"
    shutil.copytree(EXAMPLE_STORE, store, ignore=shutil.ignore_patterns("cache", "state"))
    run = (f"import sys; sys.path.insert(0, {str(site)!r}); import cortex; print(cortex.__file__, file=sys.stderr); "
           "from cortex.cli import main; main()")
    empty_hf = tmp_path / "hf"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CORTEX_HOME": str(tmp_path / "cortex-home"),
           "HF_HUB_OFFLINE": "1", "HF_HOME": str(empty_hf), "HTTPS_PROXY": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9"}
    result = subprocess.run([sys.executable, "-c", run, "recall", "which database did we pick?", "--json", "--limit", "5",
                             "--dir", str(store)], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0].startswith(str(site))  # the installed copy, not this checkout
    assert "9b3e5695d219" in [hit["id"] for hit in json.loads(result.stdout)]
    assert "full-text only" not in result.stderr
    assert not empty_hf.exists()
