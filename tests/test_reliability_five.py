"""Reliability, round five (issue 57; the probe's report is ../shared/notes/probe-round5.md): the
rows outside the cluster's and the packaged model's own modules. A weight too large for a float is
refused in one line (T8, T9); training and adapt refuse a cluster URL where they need an index
folder, before any work and without making a folder named after it (O13-O15); the in-process
document-frequency cache is bounded (S3). The cluster's rows are in test_reliability_five_client,
_ingest and _cluster; the packaged model's in test_reliability_five_model."""

from __future__ import annotations

import random
import string

import pytest

from bm25aug.errors import UserError
from test_reliability import ROOT, run_cli

HUGE = 10 ** 400  # past a float's range: float(HUGE) raises OverflowError


@pytest.mark.parametrize("terms", [{"cancer": HUGE}, {"cancer": HUGE, "cell": 1}, {"cancer": -HUGE},
                                   {"cancer": 10 ** 309}])
def test_an_integer_weight_past_a_float_is_one_error(tiny_wp, terms):
    """T8: OverflowError from ``math.isfinite(sum(weights))``."""
    from bm25aug.search.bm25 import BM25Searcher

    searcher = BM25Searcher(tiny_wp[2])
    with pytest.raises(UserError, match=r"the weight of 'cancer' is -?1000.*characters\), (over 1e\+06|negative)") as e:
        searcher.search_terms(terms, 5)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400  # the 401 digits are not echoed


def test_a_terms_file_with_a_huge_integer_weight_exits_2_naming_its_line(tiny_wp, tmp_path):
    """T9: the CLI exited 1 with a traceback."""
    terms = tmp_path / "big.jsonl"
    terms.write_text('{"id": "a", "vector": {"cancer": 1' + "0" * 400 + '}}\n')
    out = run_cli("-m", "bm25aug.cli", "search", "--index", str(tiny_wp[2]), "--terms", str(terms))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert out.stderr.startswith(f"error: {terms}:1: the weight of 'cancer' is ")


@pytest.mark.parametrize("command", [
    ["train.py", "--dataset", "DATA", "--index", "URL", "--epochs", "1", "--output-dir", "OUT"],  # argparse: --index-root
    ["train.py", "--dataset", "DATA", "--index-root", "URL", "--epochs", "1", "--output-dir", "OUT"],
    ["-m", "bm25aug.cli", "adapt", "--dataset", "DATA", "--index-root", "URL", "--output-dir", "OUT"],
    ["-m", "bm25aug.cli", "adapt", "--index", "URL", "--output-dir", "OUT"],
])
def test_train_and_adapt_refuse_a_cluster_url_before_any_work(tiny_beir, tmp_path, command):
    """O13-O15: train and adapt built `./http:/HOST:PORT,.../scifact/scifact.flat` and trained on it
    (O15: a misleading 'not a Lucene index'). The password in the URL is not echoed either."""
    url = "http://admin:s3cret/x@127.0.0.1:9/scifact"
    given = {"DATA": str(tiny_beir), "URL": url, "OUT": str(tmp_path / "out"), "train.py": str(ROOT / "train.py")}
    work = tmp_path / "work"
    work.mkdir()
    out = run_cli(*[given.get(a, a) for a in command], cwd=work)
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "is a URL" in line and "fix: " in line
    assert "s3cret" not in out.stderr and "admin" not in out.stderr
    assert not any(work.iterdir()) and not (tmp_path / "out").exists()


def test_the_document_frequency_cache_is_bounded(tiny_wp):
    """S3: ``LuceneIndex._df`` kept one entry per distinct word ever searched (600,002 after 3,000
    random queries); it is an LRU of ``cache.DF_ENTRIES``, and what it answers stays exact."""
    from bm25aug.cache import DF_ENTRIES, LRU
    from bm25aug.lucene.reader import LuceneIndex

    index = LuceneIndex(tiny_wp[2])
    assert isinstance(index._df, LRU) and index._df.size == DF_ENTRIES
    index._df = LRU(50)  # the same class, small enough to overflow here
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(2000)] + ["cat", "dog", "mat"]
    for at in range(0, len(words), 100):
        index.doc_freqs(words[at:at + 100])
        assert len(index._df) <= 50
    fresh = LuceneIndex(tiny_wp[2])
    assert index.doc_freqs(["cat", "dog", "mat", words[0]]) == fresh.doc_freqs(["cat", "dog", "mat", words[0]])
    assert index.doc_freqs(["cat"])["cat"] > 0 and index.doc_freqs([words[0]])[words[0]] == 0


def test_an_lru_forgets_the_entry_used_longest_ago():
    from bm25aug.cache import LRU

    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the newest
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3 and len(cache) == 2
    assert cache.get("b", -1) == -1
    with pytest.raises(ValueError):
        LRU(0)
