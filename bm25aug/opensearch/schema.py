"""How a bm25aug index is laid out on OpenSearch, so that it scores as the flat Lucene index does.

* **Analyzer.** Anserini's default English analyzer (``DefaultEnglishAnalyzer``, Pyserini's "flat"
  indexes) is Lucene's ``StandardTokenizer``, then ``EnglishPossessiveFilter``, ``LowerCaseFilter``,
  ``StopFilter`` with Lucene's English stopwords and ``PorterStemFilter``. OpenSearch builds the same
  chain from its own filters (``ANALYSIS``): ``stemmer``/``possessive_english``, ``lowercase``,
  ``stop``/``_english_`` and ``porter_stem``. ``tests/test_cluster.py`` checks that it gives the
  flat index's terms for every SciFact query and for documents.
* **BM25.** The index's default similarity is BM25 with our k1 and b. OpenSearch 2.x's "BM25" is
  Lucene's ``LegacyBM25Similarity``: the same formula times (1 + k1), a constant that changes no
  ranking. The searcher reads that factor from the engine's explanation of a score
  (``bm25aug.opensearch.index``; ``score_scale`` when it cannot) and divides by it, so a cluster's
  scores are Lucene's.
* **Documents.** One ``contents`` field, the title and text joined as the flat index joins them;
  a document whose contents are blank is left out, as Anserini leaves it out. The id is ``_id``,
  and again ``ID_FIELD``, a keyword with doc values only: a search reads the ids of its hits from
  there (``docvalue_fields``), not from the stored ``_id``, whose compressed blocks made the fetch
  phase most of a k=1000 search's time (docs/scale-out.md).
* **Record.** The mapping's ``_meta.bm25aug`` says which corpus an index holds, with which k1 and b,
  and how far its ingest got (``bm25aug.opensearch.ingest``).
"""

from __future__ import annotations

import numpy as np

from bm25aug.lucene.reader import B, FIELD, K1

SHARDS, REPLICAS = 2, 1  # `bm25aug index --to` defaults: each shard on one node, its copy on another
ANALYZER = "bm25aug_english"
ANALYSIS = {
    "filter": {"bm25aug_possessive": {"type": "stemmer", "language": "possessive_english"},
               "bm25aug_stop": {"type": "stop", "stopwords": "_english_"}},
    "analyzer": {ANALYZER: {"type": "custom", "tokenizer": "standard",
                            "filter": ["bm25aug_possessive", "lowercase", "bm25aug_stop", "porter_stem"]}},
}
COMPLETE, INGESTING = "complete", "ingesting"  # _meta.bm25aug.state
ID_FIELD = "id"
# OpenSearch's default for the node setting indices.query.bool.max_clause_count; a term list with
# more terms is refused before it is sent (bm25aug.opensearch.index).
DEFAULT_CLAUSE_LIMIT = 1024
# Java's String.trim() blank: only characters up to U+0020, which Anserini's empty-document check uses.
_JAVA_BLANK = "".join(map(chr, range(33)))


def index_body(shards: int, replicas: int, k1: float = K1, b: float = B, record: dict | None = None) -> dict:
    """Settings and mapping of a new index (refreshes off while it fills: ``ingest`` turns them on)."""
    return {
        "settings": {"index": {"number_of_shards": shards, "number_of_replicas": replicas, "refresh_interval": "-1",
                               "similarity": {"default": {"type": "BM25", "k1": k1, "b": b}},
                               "analysis": ANALYSIS}},
        "mappings": {"dynamic": "strict", "_meta": {"bm25aug": record or {}},
                     "properties": {FIELD: {"type": "text", "analyzer": ANALYZER},
                                    ID_FIELD: {"type": "keyword", "index": False, "doc_values": True}}},
    }


def score_scale(k1: float) -> np.float32:
    """What OpenSearch's BM25 multiplies Lucene's by: (1 + k1), in float32 as Java computes it."""
    return np.float32(1) + np.float32(k1)


def is_blank(contents: str) -> bool:
    """Whether Anserini leaves this document out (its contents trimmed are empty)."""
    return not contents.strip(_JAVA_BLANK)


def record_of(mapping: dict, index: str) -> dict:
    """``_meta.bm25aug`` of ``GET /index/_mapping``'s answer (empty: not a bm25aug index)."""
    return ((mapping.get(index) or {}).get("mappings") or {}).get("_meta", {}).get("bm25aug") or {}
