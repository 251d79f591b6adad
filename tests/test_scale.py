"""Paper scale on a small machine: training and evaluation read only the documents they need, DPR
training JSON is streamed, hard negatives come from BM25 or DPR, and the device is chosen."""

import json

import pytest
import torch

from bm25aug.errors import UserError
from bm25aug.train.arguments import TrainConfig
from bm25aug.train.trainer import resolve_device
from bm25aug.train.trainer import Trainer

N_DISTRACTORS = 600


def write_dpr(root, distractors: int = N_DISTRACTORS):
    """A DPR-format folder: passages (a few real ones, many distractors), questions with answers,
    and a biencoder training JSON with positive and hard-negative contexts."""
    root.mkdir(parents=True)
    topics = [("p1", "Paris", "Paris is the capital of France."), ("p2", "Berlin", "Berlin is the capital of Germany."),
              ("p3", "Rome", "Rome is the capital of Italy."), ("p4", "Madrid", "Madrid is the capital of Spain."),
              ("p5", "Lisbon", "Lisbon is the capital of Portugal."), ("p6", "Vienna", "Vienna is the capital of Austria.")]
    with open(root / "passages.tsv", "w") as f:
        f.write("id\ttext\ttitle\n")
        for pid, title, text in topics:
            f.write(f"{pid}\t{text}\t{title}\n")
        for i in range(distractors):
            f.write(f"x{i}\tFiller passage number {i} about rivers, hills and weather {i % 7}.\tFiller {i}\n")
    rows = [{"question": f"what is the capital of {country}", "answers": [city],
             "positive_ctxs": [{"passage_id": pid, "title": city, "text": text}],
             "negative_ctxs": [], "hard_negative_ctxs": [{"passage_id": f"x{j}", "title": "", "text": ""}
                                                         for j in range(k, k + 3)]}
            for k, ((pid, city, text), country) in enumerate(zip(topics, ["France", "Germany", "Italy", "Spain",
                                                                          "Portugal", "Austria"]))]
    (root / "train.json").write_text(json.dumps(rows, indent=1))
    (root / "test.qa.tsv").write_text("capital of france?\t['Paris']\ncapital of spain?\t['Madrid']\n")
    return root


@pytest.fixture(scope="module")
def dpr_set(tmp_path_factory):
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    root = tmp_path_factory.mktemp("dpr")
    ds = load_dataset(str(write_dpr(root / "qa")))
    return ds, ensure_index(ds, "wp", root / "indexes")


def config(out, **kw):
    settings = dict(epochs=1, batch_size=3, dev_size=1, negative_depth=3, threads=1, target="wp", device="cpu") | kw
    return TrainConfig(dataset="qa", output_dir=str(out), **settings)


def test_dpr_training_json_is_streamed_into_a_compact_cache(dpr_set, monkeypatch):
    import json as stdlib_json

    ds, _ = dpr_set

    def no_whole_file_load(*args, **kwargs):
        raise AssertionError("json.load of the whole training file")

    monkeypatch.setattr(stdlib_json, "load", no_whole_file_load)
    train = ds.split("train")
    assert train.qrels["train-0"] == {"p1": 1} and train.answers["train-0"] == ["Paris"]
    assert train.negatives["train-2"] == ["x2", "x3", "x4"]


@pytest.mark.parametrize("negatives", ["bm25", "dpr"])
def test_both_negative_sources_train(dpr_set, tmp_path, negatives):
    ds, wp = dpr_set
    out = tmp_path / negatives
    trainer = Trainer(config(out, negatives=negatives), ds, wp)
    mined = json.loads((out / f"hard_negatives.{ds.name}.json").read_text())
    if negatives == "dpr":
        assert all(ids == ds.split("train").negatives[q][:3] for q, ids in mined.items())
    assert trainer.train()["best_dev_metric"] >= 0


def test_training_and_evaluation_read_only_what_they_need(dpr_set, tmp_path, monkeypatch):
    """Rows read by training and passage texts fetched by mining and evaluation, against the
    corpus size: both are bounded by the documents touched, not by the corpus."""
    from bm25aug.data.corpus import Corpus

    ds, wp = dpr_set
    fetched = []
    original = Corpus.__getitem__
    monkeypatch.setattr(Corpus, "__getitem__", lambda self, docid: fetched.append(docid) or original(self, docid))
    trainer = Trainer(config(tmp_path / "reads"), ds, wp)
    touched = {r for e in trainer.examples for r in (*e.positives, *e.negatives)}
    assert trainer.corpora[0].bm25.rows_read == len(touched) < 40  # of 606 passages
    trainer.train()
    # Mining filters at most depth + 20 hits per query by answer; the dev evaluation reads hits until an answer.
    assert 0 < len(fetched) <= 6 * 23 + 2 * 100 and len(set(fetched)) < len(ds.corpus) // 3
    assert trainer.corpora[0].bm25.rows_read <= len(touched) + 2  # random negatives are read only when drawn


def test_device_choice():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="--device cuda.*fix"):
            resolve_device("cuda")
    with pytest.raises(UserError, match="unknown device"):
        resolve_device("tpu")


def test_dpr_negatives_need_dpr_hard_negatives(tiny_wp, tmp_path):
    ds, wp, _ = tiny_wp
    with pytest.raises(UserError, match="--negatives bm25"):
        Trainer(TrainConfig(dataset="tiny", output_dir=str(tmp_path / "x"), epochs=1, batch_size=4, dev_size=2,
                            threads=1, target="wp", negatives="dpr"), ds, wp)


def test_corpus_table_packed_in_chunks_reads_as_one(tmp_path, monkeypatch):
    """The offset table is packed into numpy every ``_CHUNK`` lines, so a scan holds few Python
    objects whatever the corpus size; chunks with ids of other widths, and a repeated id in
    another chunk than its first line, read back as one table."""
    from bm25aug.data import corpus as corpus_module

    path = tmp_path / "corpus.jsonl"
    rows = [("a", "first"), ("bb", "x"), ("c" * 12, "long id"), ("a", "impostor"), ("", None), ("d", "last")]
    path.write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" if t else "\n" for i, t in rows))
    whole = corpus_module.Corpus(path, "beir")
    monkeypatch.setattr(corpus_module, "_CHUNK", 2)
    chunked = corpus_module.Corpus(path, "beir")
    for name in ("_offsets", "_lines_of", "_sorted_ids", "_sorted_lines", "_keep"):
        assert getattr(chunked, name).tolist() == getattr(whole, name).tolist(), name
    assert len(chunked) == 4 and chunked["a"].text == "first" and chunked["c" * 12].text == "long id"
    assert [d for d, _ in chunked.items()] == ["a", "bb", "c" * 12, "d"] and chunked.has(["d", "e"]).tolist() == [True, False]
