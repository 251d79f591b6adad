"""``bm25aug adapt``: fit the query model to a corpus with no queries and no judgements.

GPL-style (Wang et al., NAACL 2022) for a query-side model over a stock BM25 index: pseudo-queries
made from the corpus (``queries``), candidates from BM25 on the flat index the model will serve,
scores from a stronger teacher (``teacher``: the packaged dense model, its corpus embeddings cached
as the dense peer's), and a loss toward the teacher's scores trained end to end through torch BM25
(``trainer``). The label-free gate (``gate``) holds out pseudo-queries judged by the teacher and
serves the folder as plain BM25 unless the adapted model beats BM25 on them. ``command`` is the
command line; ``source`` reads a dataset, a corpus file or a stock index; ``card`` says how a
folder was adapted.
"""
