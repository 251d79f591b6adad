"""Search on an OpenSearch cluster, beside ``bm25aug.lucene``: the same searchers, the same scores.

* ``client``: a cluster's URL and a small JSON-over-HTTP client that fails over between its nodes;
* ``schema``: the index's analyzer, similarity and mapping, so that it scores as the flat index;
* ``ingest``: ``bm25aug index --to URL``, streamed in bulk, resumable;
* ``index``: ``OpenSearchIndex``, what ``BM25Searcher`` searches when ``--index`` is a URL;
* ``local``: ``bm25aug cluster start|status|stop|delete``, a real cluster on this machine.
"""
