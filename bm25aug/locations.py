"""Where an index is: the only code that tells an OpenSearch cluster's URL, an index folder and
a Pyserini prebuilt index's name apart (``index_location``).

Below every backend, so that each layer asks the same question the same way: the commands, the
server and eval open what it names through ``bm25aug.search.indexes``; training and adapt,
which read Lucene's own files, refuse a cluster with it. Any ``scheme://`` text is a cluster's
(``bm25aug.opensearch.client.ClusterURL`` then says, in one line, what a cluster URL must be); a
``Path``, or text naming a folder that exists, is a folder; other text is a prebuilt index's name.
"""

from __future__ import annotations

from pathlib import Path

CLUSTER, FOLDER, PREBUILT = "cluster", "folder", "prebuilt"


def index_location(location: str | Path) -> str:
    """``CLUSTER``, ``FOLDER`` or ``PREBUILT``: what kind of place ``location`` (an ``--index``) names."""
    if isinstance(location, str) and "://" in location:
        return CLUSTER
    if isinstance(location, Path) or Path(location).is_dir():
        return FOLDER
    return PREBUILT


def url_scheme(location: str | Path) -> str:
    """How a message names a cluster's URL without echoing it (it may hold credentials): ``http://...``."""
    return f"{str(location).split('://')[0]}://..."
