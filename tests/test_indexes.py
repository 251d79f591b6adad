"""Where an index is, told apart in one place (``bm25aug.locations``) and opened in one place
(``bm25aug.search.indexes``): a folder, a Pyserini prebuilt name, a cluster's URL."""

from pathlib import Path

import pytest

from bm25aug.errors import UserError
from bm25aug.locations import CLUSTER, FOLDER, PREBUILT, index_location


def test_a_location_is_a_cluster_a_folder_or_a_prebuilt_name(tmp_path):
    assert index_location("http://127.0.0.1:9200/scifact") == CLUSTER
    assert index_location("HTTPS://a:1,b:2/x?stats=local") == CLUSTER
    assert index_location("ftp://host/x") == CLUSTER  # a scheme: ClusterURL says what a cluster URL must be
    assert index_location(str(tmp_path)) == FOLDER
    assert index_location(tmp_path / "not-yet") == FOLDER  # a Path is a folder, even one still to be made
    assert index_location("beir-v1.0.0-scifact.flat") == PREBUILT
    assert index_location(str(tmp_path / "missing")) == PREBUILT  # locate_index then says it is neither


def test_a_folder_only_reader_refuses_a_cluster_in_one_line_without_echoing_it(tmp_path):
    from bm25aug.search.indexes import folder_only, local_folder

    assert folder_only(str(tmp_path), "x", "y") == tmp_path and local_folder(str(tmp_path)) == tmp_path
    assert local_folder("http://127.0.0.1:9/s") is None
    with pytest.raises(UserError) as e:
        folder_only("http://127.0.0.1:9/s3cret", "bm25-rm3", "stored document vectors")
    message = str(e.value)
    assert message.startswith("bm25-rm3 reads what only an index folder holds") and "fix:" in message
    assert "\n" not in message and "s3cret" not in message


def test_a_bad_cluster_url_is_one_line_from_every_opener():
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.search.peers import ExpansionSearcher

    with pytest.raises(UserError, match="is not a cluster URL; fix"):
        BM25Searcher("ftp://127.0.0.1:9/scifact")
    with pytest.raises(UserError, match="bm25-rocchio reads what only an index folder holds.*fix"):
        ExpansionSearcher("http://127.0.0.1:9/scifact", "rocchio")


def test_open_index_opens_a_folder_as_bm25_searcher_does(tiny_wp):
    from bm25aug.lucene.reader import LuceneIndex
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.search.indexes import locate_index, open_index

    _, wp, flat = tiny_wp
    assert locate_index(str(flat)) == Path(flat)
    opened = open_index(str(flat), 0.9, 0.4)
    assert isinstance(opened.index, LuceneIndex) and opened.meta.flavor == "flat" and opened.tokenizer is None
    searcher = BM25Searcher(flat)
    assert searcher.index_dir == Path(flat) and searcher.meta.flavor == "flat"
    terms = {"cat": 1.0, "mat": 2.0}
    top, again = opened.index.search(opened.index.weighted_query(terms), 5), searcher.search_terms_arrays(terms, 5)
    assert top.lucene_ids.tolist() == again.lucene_ids.tolist() and top.scores.tolist() == again.scores.tolist()
    wp_opened = open_index(wp, 0.9, 0.4)
    assert wp_opened.meta.flavor == "wp" and wp_opened.tokenizer is not None
    with pytest.raises(UserError, match="is a wp index, not flat; fix"):
        open_index(wp, 0.9, 0.4, flavor="flat")


@pytest.mark.parametrize("flags, named", [(["--shards", "3"], "--shards"), (["--replicas", "0"], "--replicas"),
                                          (["--k1", "1.2"], "--k1"), (["--shards", "1", "--b", "0.7"], "--shards and --b")])
def test_index_refuses_the_cluster_only_flags_without_to_and_writes_nothing(tiny_beir, tmp_path, capsys, flags, named):
    """``bm25aug index`` decides in one place (``search/index_command.py``): ``--to URL`` to the
    cluster, else the index folders, whose command refuses what only a cluster's index takes."""
    from bm25aug.cli import main

    root = tmp_path / "indexes"
    assert main(["index", "--dataset", str(tiny_beir), "--index-root", str(root), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {named} ") and "for `index --to URL`" in err and "fix: add --to URL" in err
    assert len(err.splitlines()) == 1
    assert not root.exists()
