"""Stored documents: what Anserini kept of each document at indexing time (``-storeRaw``).

The server returns them beside hits and by docid, as Anserini's REST API and Pyserini's
``LuceneSearcher.doc`` do. An index built without raw documents answers None.
"""

from __future__ import annotations

from typing import Sequence

from bm25aug.lucene.jvm import JNI_LOCK
from bm25aug.lucene.reader import LuceneIndex

RAW_FIELD = "raw"


def raw_documents(index: LuceneIndex, numbers: Sequence[int]) -> list[str | None]:
    """The stored raw text of each Lucene doc number (None where none was stored)."""
    if not len(numbers):
        return []
    with JNI_LOCK:  # pyjnius calls on shared classes (bm25aug.lucene.reader's docstring)
        stored = index.reader.storedFields()
    docs = []
    for n in numbers:  # the lock is taken per document: a deep request never stalls other Java calls
        with JNI_LOCK:
            docs.append(stored.document(int(n)).get(RAW_FIELD))
    return docs
