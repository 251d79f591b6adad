"""Index-backed torch BM25: rows read per document equal the rows built from every posting.

The reference here walks every posting of the index (what training did before it read rows on
demand); the library itself never does."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from bm25aug.lucene.doc_terms import DocTermReader, field_statistics, term_dictionary
from bm25aug.lucene.jvm import JNI_LOCK, jclass
from bm25aug.bm25_defaults import FIELD
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.train.torch_bm25 import LENGTH_TABLE, BM25Params, TorchBM25, int_to_byte4


def full_postings(index: LuceneIndex) -> tuple[sp.csr_matrix, list[str], np.ndarray]:
    """docs x terms raw frequencies from every posting, the terms, and their df."""
    from jnius import cast

    rows, cols, vals, terms, dfs = [], [], [], [], []
    with JNI_LOCK:
        freqs = jclass("org.apache.lucene.index.PostingsEnum").FREQS
        no_more = jclass("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
        reader = cast("org.apache.lucene.index.IndexReader", index.reader)
        it = jclass("org.apache.lucene.index.MultiTerms").getTerms(reader, FIELD).iterator()
        while (ref := it.next()) is not None:
            terms.append(ref.utf8ToString())
            dfs.append(it.docFreq())
            postings = it.postings(None, freqs)
            while (doc := postings.nextDoc()) != no_more:
                rows.append(doc)
                cols.append(len(terms) - 1)
                vals.append(postings.freq())
    tf = sp.csr_matrix((np.asarray(vals, np.float32), (rows, cols)), shape=(index.num_docs, len(terms)))
    return tf, terms, np.asarray(dfs)


def full_matrix_rows(tf: sp.csr_matrix, k1=0.9, b=0.4) -> sp.csr_matrix:
    """f(d) for every document from the full matrix, as TorchBM25 computed it before (lengths
    from row sums, pushed through Lucene's one-byte norm)."""
    lengths = np.asarray(tf.sum(axis=1)).ravel()
    avgdl = np.float32(lengths.sum() / tf.shape[0])
    dl = LENGTH_TABLE[np.asarray([int_to_byte4(int(n)) for n in lengths])].astype(np.float32)
    k1, b, one = np.float32(k1), np.float32(b), np.float32(1)
    norm_inverse = one / (k1 * ((one - b) + b * dl / avgdl))
    x = tf.data.astype(np.float32) * np.repeat(norm_inverse, np.diff(tf.indptr))
    return sp.csr_matrix(((one - one / (one + x)).astype(np.float32), tf.indices, tf.indptr), shape=tf.shape)


@pytest.mark.parametrize("flavor", ["flat", "wp"])
def test_on_demand_rows_equal_full_matrix_rows(flavor, scifact_flat, scifact_wp):
    path = scifact_flat if flavor == "flat" else scifact_wp
    index = LuceneIndex(path)
    tf, terms, df = full_postings(index)
    reference = full_matrix_rows(tf)
    bm25 = TorchBM25(path, None)  # columns = the index's own terms, for both flavors
    assert bm25.terms == terms
    assert np.array_equal(bm25.df.numpy(), df.astype(np.float32))
    doc_count, total = field_statistics(index)
    assert (doc_count, total) == (index.num_docs, int(tf.sum()))  # every SciFact document has contents
    rows = np.random.default_rng(0).choice(index.num_docs, 400, replace=False)
    got = bm25.doc_matrix(rows).to_dense().numpy()
    assert np.array_equal(got, reference[rows].toarray())  # bit for bit: same float32 steps
    assert bm25.rows_read == 400
    index.close()


def test_wp_rows_from_raw_text_equal_vocabulary_rows(scifact_wp):
    """A wp index has no term vectors: its rows come from the stored pre-tokenized text."""
    from bm25aug.tokenization import load_tokenizer

    vocab = load_tokenizer().get_vocab()
    bm25 = TorchBM25(scifact_wp, vocab)
    assert not bm25.reader.has_vectors
    index = LuceneIndex(scifact_wp)
    tf, terms, _ = full_postings(index)
    remap = sp.csr_matrix((np.ones(len(terms), np.float32), (np.arange(len(terms)), [vocab[t] for t in terms])),
                          shape=(len(terms), len(vocab)))
    reference = full_matrix_rows(tf) @ remap
    rows = list(range(0, index.num_docs, 37))
    assert np.array_equal(bm25.doc_matrix(rows).to_dense().numpy(), reference[rows].toarray())
    index.close()


def test_reader_counts_and_norms(tiny_wp):
    _, wp, _ = tiny_wp
    index = LuceneIndex(wp)
    reader = DocTermReader(index, pretokenized=True)
    terms, df = term_dictionary(index)
    assert len(terms) == len(df) and all(df > 0)
    lengths = [sum(reader.terms(d).values()) for d in range(index.num_docs)]
    assert reader.reads == index.num_docs
    assert reader.norm_bytes(np.arange(index.num_docs)[::-1]).tolist() == [int_to_byte4(n) for n in lengths[::-1]]
    index.close()


def test_torch_bm25_reads_only_the_rows_it_scores(tiny_wp):
    from bm25aug.tokenization import load_tokenizer

    _, wp, _ = tiny_wp
    bm25 = TorchBM25(wp, load_tokenizer().get_vocab(), BM25Params())
    assert bm25.rows_read == 0  # setup reads statistics, no document
    bm25.score(torch.ones(1, len(bm25.idf)), [0, 2, 2])
    assert bm25.rows_read == 2
    with pytest.raises(KeyError, match="not in"):
        bm25.rows(["no-such-doc"])
