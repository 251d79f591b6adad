"""How a bm25aug index is laid out on OpenSearch, so that it scores as the flat Lucene index does.

* **Analyzer.** Anserini's default English analyzer (``DefaultEnglishAnalyzer``, Pyserini's "flat"
  indexes) is Lucene's ``StandardTokenizer``, then ``EnglishPossessiveFilter``, ``LowerCaseFilter``,
  ``StopFilter`` with Lucene's English stopwords and ``PorterStemFilter``. OpenSearch builds the same
  chain from its own filters (``ANALYSIS``): ``stemmer``/``possessive_english``, ``lowercase``,
  ``stop``/``_english_`` and ``porter_stem``. ``tests/test_cluster.py`` checks that it gives the
  flat index's terms for every SciFact query and for documents.
* **BM25.** The index's default similarity is BM25 with our k1 and b. OpenSearch 3.x's "BM25" is
  Lucene's ``BM25Similarity``, scores bit for bit Lucene's; 2.x's is ``LegacyBM25Similarity``: the
  same formula times (1 + k1), a constant that changes no ranking. The searcher reads that factor
  (1 or 1 + k1) from the engine's explanation of a score (``identity.engine_scale``; by the
  engine's version when nothing is indexed) and divides by it, so a cluster's scores are Lucene's.
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

from bm25aug.bm25_defaults import B, FIELD, K1

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


# What a record holds, and of which type (``record_of`` checks each one that is there).
RECORD_FIELDS = {"dataset": str, "fingerprint": str, "k1": (int, float), "b": (int, float), "shards": int,
                 "replicas": int, "state": str, "next": int, "docs": int}


def record_of(mapping, index: str, where: str | None = None) -> dict:
    """``_meta.bm25aug`` of ``GET /index/_mapping``'s answer (empty: not a bm25aug index), each of
    its fields checked: a record of the wrong shape is an error naming ``where`` and the fix."""
    entry = mapping.get(index) if isinstance(mapping, dict) else None
    mappings = entry.get("mappings") if isinstance(entry, dict) else None
    meta = mappings.get("_meta") if isinstance(mappings, dict) else None
    record = meta.get("bm25aug") if isinstance(meta, dict) else None
    if record in (None, {}):
        return {}
    bad = ("it is not an object" if not isinstance(record, dict) else
           next((f"{key!r} is {record[key]!r}" for key, kind in RECORD_FIELDS.items()
                 if key in record and (not isinstance(record[key], kind) or isinstance(record[key], bool))), None) or
           next((f"it has no {key!r}" for key in ("state", "k1", "b") if key not in record), None) or
           (f"its state is {record['state']!r}" if record["state"] not in (COMPLETE, INGESTING) else None))
    if bad:
        raise_damaged(where or index, bad)
    return record


def raise_damaged(where: str, why: str):
    from bm25aug.errors import UserError

    raise UserError(f"{where} has a bm25aug record (_meta.bm25aug in its mapping) that is damaged ({why}), so it "
                    f"was not made by this bm25aug or was changed since; fix: make it again with `bm25aug index "
                    f"--dataset NAME --to URL --force`, or search another index")
