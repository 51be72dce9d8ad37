"""The bundled model: present in the package, loaded offline, equal to model2vec."""

from __future__ import annotations

import json
import re
from importlib import metadata

import numpy as np
import pytest

from cortex.embedding import EncoderUnavailable, StaticEncoder, bundled_model_path, load_encoder
from tests.helpers import EXAMPLE_STORE, cortex

TEXTS = [
    "We use SQLite, not Postgres, for the local cache: no server to run",
    "which database did we pick?",
    "",
    "Ünïcode — “quotes”, emoji ✓ and kubernetes pytest docker-compose",
    "sqlite3.OperationalError: database is locked " * 200,  # long enough to be cut at max_length
    "[UNK] [CLS] ### ~~~",
]


def test_the_model_ships_inside_the_package_within_budget():
    folder = bundled_model_path()
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "config.json", "README.md"} <= names
    assert sum(p.stat().st_size for p in folder.iterdir()) < 16 * 1024 * 1024
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "Apache" in readme and "all-MiniLM-L6-v2" in readme


def test_lean_encoder_gives_model2vec_s_vectors():
    from model2vec import StaticModel

    lean = StaticEncoder(bundled_model_path()).encode(TEXTS)
    reference = np.asarray(StaticModel.from_pretrained(str(bundled_model_path())).encode(TEXTS), dtype=np.float32)
    assert lean.shape == reference.shape == (len(TEXTS), 256)
    assert np.abs(lean - reference).max() <= 1e-5
    norms = np.linalg.norm(lean, axis=1)
    assert np.allclose(norms[[0, 1, 3, 4]], 1.0, atol=1e-5) and norms[2] == 0.0


def test_paraphrases_are_closer_than_unrelated_text():
    encoder = load_encoder("bundled")
    memory, question, unrelated = encoder.encode(
        ["We use SQLite, not Postgres, for the local cache", "which database did we pick?",
         "The CI pipeline publishes wheels on every tag"]
    )
    assert memory @ question > memory @ unrelated + 0.1


def test_torch_and_sentence_transformers_are_not_runtime_dependencies():
    """Walk the installed requirement closure of cortex: no torch, transformers or sentence-transformers."""
    seen: set[str] = set()
    todo = ["cortex-git-memory"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" in requirement:
                continue  # optional extras are not installed by `pip install cortex-git-memory`
            todo.append(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0])
    assert "model2vec" in seen and "numpy" in seen
    assert not seen & {"torch", "transformers", "sentence-transformers"}


def test_a_missing_model_folder_is_a_clear_error():
    with pytest.raises(EncoderUnavailable, match="no model folder"):
        load_encoder("./definitely/not/here")


def test_recall_works_offline_with_no_hub_cache(tmp_path):
    """A paraphrase query finds its memory with the hub switched off, an empty HF cache and no network."""
    empty_hf = tmp_path / "hf-home"
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(empty_hf),
        "HUGGINGFACE_HUB_CACHE": str(empty_hf / "hub"),
        "HTTP_PROXY": "http://127.0.0.1:9",  # any network attempt fails fast
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "ALL_PROXY": "http://127.0.0.1:9",
    }
    store = tmp_path / "example"
    import shutil

    shutil.copytree(EXAMPLE_STORE, store, ignore=shutil.ignore_patterns("cache", "state"))
    result = cortex("recall", "which database did we pick?", "--limit", "5", "--json", "--dir", str(store),
                    cwd=tmp_path, env=env)
    assert "9b3e5695d219" in [hit["id"] for hit in json.loads(result.stdout)]
    assert "full-text only" not in result.stderr
    assert not empty_hf.exists() or not any(empty_hf.rglob("*"))
