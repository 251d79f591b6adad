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
    cluster_only = {"--shards": getattr(args, "shards", None) is not None,
                    "--replicas": getattr(args, "replicas", None) is not None,
                    "--k1": getattr(args, "k1", K1) != K1, "--b": getattr(args, "b", B) != B}
    if given := [flag for flag, set_ in cluster_only.items() if set_]:
        raise UserError(f"{' and '.join(given)} set up a cluster's index (BM25 settings are the searcher's on a Lucene "
                        f"index); fix: add --to URL, or drop them and pass --k1/--b when searching")
    from bm25aug.lucene.index import run as to_folders

    to_folders(args)
