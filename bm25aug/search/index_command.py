"""``bm25aug index``: a dataset's Lucene index folders (``bm25aug.lucene.index``), or with ``--to
URL`` its flat index on an OpenSearch cluster (``bm25aug.opensearch.ingest``). Which one, and the
flags only a cluster's index takes (``--shards``, ``--replicas``, and ``--k1``/``--b``, which a
cluster's index records while a Lucene folder leaves them to the searcher), are decided here."""

from __future__ import annotations

from bm25aug.bm25_defaults import B, K1
from bm25aug.errors import UserError


def run(args) -> None:
    if getattr(args, "to", None):
        from bm25aug.opensearch.ingest import run as to_cluster

        return to_cluster(args)
    layout = [flag for flag, value in (("--shards", getattr(args, "shards", None)),
                                       ("--replicas", getattr(args, "replicas", None))) if value is not None]
    bm25 = [flag for flag, value, default in (("--k1", getattr(args, "k1", K1), K1), ("--b", getattr(args, "b", B), B))
            if value != default]
    if layout or bm25:
        what = " and ".join(layout + bm25)
        why = "a cluster's index takes them" if layout else "a Lucene index leaves BM25's settings to its searcher"
        fix = "drop them and pass --k1/--b when searching" if bm25 and not layout else "drop them"
        raise UserError(f"{what} {'is' if len(layout + bm25) == 1 else 'are'} for `index --to URL` ({why}); fix: add "
                        f"--to URL, or {fix}")
    from bm25aug.lucene.index import run as to_folders

    to_folders(args)
