"""Search on an OpenSearch cluster, beside ``bm25aug.lucene``: the same searchers, the same scores.

* ``client``: a cluster's URL, and ``Client``: every request through one opensearch-py
  ``OpenSearch`` client (built for the URL by ``transport``: timeouts, TLS, credentials, failover;
  or the user's own), its exceptions as ours in one place (``nodes``: which node to ask first, and
  the probes that bring a failed one back; ``retry``: the one policy for sending again);
* ``schema``: the index's analyzer, similarity and mapping, so that it scores as the flat index;
* ``ingest``: ``bm25aug index --to URL``, streamed in bulk, resumable;
* ``index``: ``OpenSearchIndex``, what ``BM25Searcher`` searches when ``--index`` is a URL
  (``identity``: that it stays the index it opened; ``window``: how deep a search goes within the
  result window; ``answers``: reading the cluster's answers, an odd shape as one line);
* ``layout``: the ``Layout`` protocol, what differs between an index bm25aug made (``OwnLayout``)
  and a user's own searched read-only with ``?field=NAME`` (``user_index.UserLayout``, whose
  analyzer ``field_analysis`` checks through the cluster's ``_analyze``);
* ``local``: ``bm25aug cluster start|status|stop|delete``, a real cluster on this machine
  (``launcher``: the engine versions, the JDK each runs on and their jars; ``cluster_folder``: its
  folder and record; ``node_settings``: a node's ports and settings).
"""
