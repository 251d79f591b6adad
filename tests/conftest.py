"""Shared fixtures: tiny corpora written to temp dirs, and the real data in $BM25AUG_DATA_DIR."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`'s workers, one per core: torch's threads would fight
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

TINY_DOCS = {
    "d1": ("Cats", "The cat sat on the mat and purred."),
    "d2": ("Dogs", "A dog barked at the mailman all morning."),
    "d3": ("Felines", "Lions and tigers are large cats living in prides."),
    "d4": ("Weather", "Rain is expected tomorrow with strong winds."),
    "d5": ("Cooking", "Boil the pasta for ten minutes, then add the sauce."),
    "d6": ("Astronomy", "The telescope revealed distant galaxies and nebulae."),
    "d7": ("Birds", "Sparrows and finches sing at dawn in the garden."),
    "d8": ("Cars", "The electric car charges overnight in the garage."),
}
TINY_QUERIES = {"q1": "cat on a mat", "q2": "dog barking", "q3": "big cats lions", "q4": "rain and wind",
                "q5": "pasta sauce", "q6": "galaxies telescope", "q7": "birds singing", "q8": "electric car"}


def write_beir(root: Path, docs=TINY_DOCS, queries=TINY_QUERIES, splits=("train", "test")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w") as f:
        for did, (title, text) in docs.items():
            f.write(json.dumps({"_id": did, "title": title, "text": text}) + "\n")
    with open(root / "queries.jsonl", "w") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    for split in splits:
        with open(root / "qrels" / f"{split}.tsv", "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for qid in queries:
                f.write(f"{qid}\td{qid[1:]}\t1\n")
    return root


@pytest.fixture
def tiny_beir(tmp_path) -> Path:
    return write_beir(tmp_path / "tiny")


@pytest.fixture(scope="session")
def tiny_wp(tmp_path_factory):
    """A tiny dataset with both indexes built (the JVM starts once per session)."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    root = tmp_path_factory.mktemp("tinyset")
    ds = load_dataset(str(write_beir(root / "tiny")))
    return ds, ensure_index(ds, "wp", root / "indexes"), ensure_index(ds, "flat", root / "indexes")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = os.environ.get("BM25AUG_DATA_DIR")
    if not path or not (Path(path) / "scifact" / "corpus.jsonl").exists():
        pytest.skip("real-data test: set BM25AUG_DATA_DIR to ../shared/data (make test does)")
    return Path(path)


@pytest.fixture(scope="session")
def scifact(data_dir):
    from bm25aug.data.registry import load_dataset

    return load_dataset("scifact", data_dir)


@pytest.fixture(scope="session")
def scifact_wp(scifact):
    from bm25aug.lucene.index import ensure_index

    return ensure_index(scifact, "wp")


@pytest.fixture(scope="session")
def scifact_flat(scifact):
    from bm25aug.lucene.index import ensure_index

    return ensure_index(scifact, "flat")


@pytest.fixture(scope="session")
def offline_model():
    from bm25aug.model.augmenter import QueryAugmenter

    return QueryAugmenter.from_encoder(target="wp", weight_floor=0.0)


@pytest.fixture(scope="session")
def flat_model():
    """An untrained model for the flat target (w ≡ 1 at init; a from the tied init)."""
    from bm25aug.model.augmenter import QueryAugmenter

    return QueryAugmenter.from_encoder(target="flat").eval()


class Interrupted(Exception):
    """What ``Counting`` raises, as an interrupted encoding would."""


class Counting:
    """A peer's model (dense or SPLADE) that counts the documents it encodes; after ``fail_after``
    calls it raises ``Interrupted``, as an interrupted encoding would."""

    def __init__(self, model, fail_after: int | None = None):
        self.model, self.name, self.dim, self.digest = model, model.name, model.dim, model.digest
        self.documents, self.calls, self.fail_after = 0, 0, fail_after

    @property
    def corpus_encoder(self):
        return self

    def encode_queries(self, texts):
        return self.model.encode_queries(texts)

    def encode_documents(self, texts):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise Interrupted
        self.calls, self.documents = self.calls + 1, self.documents + len(texts)
        return self.model.encode_documents(texts)
