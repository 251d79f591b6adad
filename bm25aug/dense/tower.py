"""A dense query tower (issue 76): a small query encoder trained to put each query where a corpus
model's own query encoder puts it, searched against that corpus model's document vectors as they
are (Wang & Lyu, 2023). Nothing of the corpus is encoded again: the corpus cache and the HNSW
index are the corpus model's (``corpus_encoder``).

A tower is a folder: its ONNX graph (``model.onnx``, a BERT encoder's inputs, ``last_hidden_state``
out), ``tokenizer.json`` and its record (``bm25aug-dense.json``) with ``"role": "query-tower"``, the
kind whose pooling, length and instruction it uses, the checksum of each file (checked before
anything is read, as for a fetched model), and the corpus model it was aligned to: its pinned name
(``corpus_model``) and its digest (``corpus_digest``). ``load_dense_model(FOLDER)`` loads the tower
with that corpus model; any other pairing is refused in one line (``QueryTower``), since a query
vector is only meaningful against the document vectors of the model it was aligned to.

``python -m bm25aug.train.tower_build RUN OUT --name NAME`` writes a tower folder from a training
run (``bm25aug.train.tower``): the graph, the tokenizer, the record and a card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bm25aug.dense.models import DenseModel, SplitPrecision, _BertModel
from bm25aug.dense.record import RECORD
from bm25aug.errors import UserError

ROLE = "query-tower"


class QueryTower(SplitPrecision):
    """Queries by the tower, documents by the corpus model it was aligned to (``paired``: that
    model's name and digest, from the tower's record). Another corpus model is refused."""

    def __init__(self, name: str, queries: _BertModel, documents: DenseModel, paired: dict):
        if (documents.name, documents.digest) != (paired.get("corpus_model"), paired.get("corpus_digest")):
            raise UserError(f"the query tower {name} was aligned to {paired.get('corpus_model')}'s vectors (digest "
                            f"{str(paired.get('corpus_digest'))[:12]}), not to {documents.name} "
                            f"({documents.digest[:12]}); fix: load the tower alone (its corpus model comes with it), "
                            f"or search {documents.name} with its own query encoder")
        super().__init__(name, queries, documents)


def is_tower(record: dict) -> bool:
    return record.get("role") == ROLE


def load_tower(path: Path, record: dict, queries: _BertModel, corpus_model: Callable[[str], DenseModel]) -> QueryTower:
    """The tower in ``path`` (its graph already loaded as ``queries``) with the corpus model its
    record names, loaded by ``corpus_model`` (a pinned model's name: ``PINNED``)."""
    from bm25aug.dense.fetch import PINNED

    corpus = record.get("corpus_model")
    if corpus not in PINNED:
        raise UserError(f"{path / RECORD} pairs the tower with {corpus!r}, which is no pinned dense model; fix: "
                        f"restore the tower's folder, or pass one aligned to one of {', '.join(PINNED)}")
    name = record.get("name") if isinstance(record.get("name"), str) else path.name
    return QueryTower(name, queries, corpus_model(corpus), record)
