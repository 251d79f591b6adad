import numpy as np
import torch

from bm25aug.lucene.jvm import jclass
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.train.torch_bm25 import BM25Params, TorchBM25, byte4_to_int, int_to_byte4


def test_smallfloat_port_matches_lucene():
    small_float = jclass("org.apache.lucene.util.SmallFloat")
    for n in list(range(0, 300)) + [1000, 4097, 12345, 10**6, 2**31 - 1]:
        byte = small_float.intToByte4(n)
        assert (byte & 0xFF) == int_to_byte4(n), n
        assert small_float.byte4ToInt(byte) == byte4_to_int(int_to_byte4(n)), n


def lucene_raw_scores(index_dir, terms: dict[str, float], k: int) -> tuple[list[str], np.ndarray]:
    """Scores straight from Lucene's IndexSearcher (Anserini rounds its hits to 4 decimals)."""
    from bm25aug.lucene.reader import LuceneIndex

    index = LuceneIndex(index_dir)
    docs, scores = index.raw_top(index.weighted_query(terms), k)
    index.close()
    return index.docids[docs].tolist(), scores.astype(np.float64)


def _compare(index_dir, tokenizer, terms: dict[str, float], k: int = 200) -> float:
    bm25 = TorchBM25(index_dir, tokenizer.get_vocab(), BM25Params())
    docids, lucene = lucene_raw_scores(index_dir, terms, k)
    vocab = tokenizer.get_vocab()
    boosts = torch.zeros(1, len(vocab))
    for t, w in terms.items():
        boosts[0, vocab[t]] = w
    ours = bm25.score(boosts, bm25.rows(docids))[0].numpy()
    return float(np.max(np.abs(ours - lucene) / lucene))


def test_torch_scores_equal_lucene_tiny(tiny_wp):
    from bm25aug.tokenization import load_tokenizer

    _, wp, _ = tiny_wp
    assert _compare(wp, load_tokenizer(), {"cat": 1.0, "the": 0.5, "lions": 2.25}) < 1e-4


def test_torch_scores_equal_lucene_on_scifact(scifact, scifact_wp):
    """Weighted queries (real query terms plus added ones) on the real SciFact wp index."""
    from bm25aug.tokenization import load_tokenizer

    tok = load_tokenizer()
    searcher = BM25Searcher(scifact_wp, tokenizer=tok)
    rng = np.random.default_rng(0)
    vocab_terms = [t for t in tok.get_vocab() if not t.startswith("[")]
    split = scifact.split("test")
    for qid in list(split.queries)[:20]:
        terms = {t: float(c * rng.uniform(0.1, 3)) for t, c in searcher.query_terms(split.queries[qid]).items()}
        terms.update({str(t): float(rng.uniform(0.01, 1)) for t in rng.choice(vocab_terms, 10)})
        assert _compare(scifact_wp, tok, terms, k=100) < 1e-4
