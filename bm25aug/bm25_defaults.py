"""BM25 as Anserini's BEIR regressions run it, below every backend: its parameters and the names
of the fields an index holds. A Lucene folder (``bm25aug.lucene``) and an OpenSearch index
(``bm25aug.opensearch``) are built and searched with these; nothing else defines them."""

K1, B = 0.9, 0.4  # BM25's k1 and b: the default everywhere
FIELD = "contents"  # the field a document's text is indexed in, and the one a query searches
TITLE_FIELD = "title"  # a multifield index's second field (Anserini's BeirMultifieldCollection)
# Pyserini's bm25-multifield (its BEIR 2CR: --fields contents=1.0 title=1.0): the default field weights.
MULTIFIELD_WEIGHTS = {FIELD: 1.0, TITLE_FIELD: 1.0}
RAW_FIELD = "raw"  # the document as Anserini stored it (-storeRaw): what the server returns with hits
