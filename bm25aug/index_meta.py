"""What an index is, whatever holds it: ``IndexRecord``, the record of an index's flavor, corpus and
build, below both backends. A Lucene folder keeps it as ``meta.json`` (``bm25aug.lucene.index.IndexMeta``
reads it, or infers it for a stock index); a cluster's index builds one from the record its ingest
wrote (``bm25aug.opensearch.index``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class IndexRecord:
    """An index's flavor, its corpus (name, size, fingerprint) and how it was built."""

    flavor: str
    dataset: str
    num_docs: int
    tokenizer: str | None = None
    vocab_hash: str | None = None
    threads: int = 1
    build_seconds: float = 0.0
    corpus_fingerprint: str = ""
    anserini: str = "IndexCollection JsonCollection DefaultLuceneDocumentGenerator"
    docvectors: bool = False  # stored document vectors, which Pyserini's RM3 and Rocchio need
    stock: bool = False  # built elsewhere (Pyserini/Anserini); bm25aug never writes into it

    normalization: str | None = None  # wp: how the tokenizer lowercases and splits (tokenization.normalization)
