"""Reliability, round six (issue 65; ``../shared/notes/probe-round6.md``), the rows outside the
cluster and the dense peer's files: a repeated ``serve --dense``/``--model`` (SV7), a weight given
to rrf through the class (H2), every searcher's ``search`` and ``batch_search`` (H10), the error
of ``--method dense`` with a fusion flag (EV3), the wheel (item 7) and a test writing into the
repository's ``indexes/`` (item 8)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bm25aug.errors import UserError
from conftest import write_beir

REPO = Path(__file__).resolve().parents[1]
DENSE = "all-MiniLM-L6-v2"  # a pip dependency: nothing to fetch


@pytest.mark.parametrize("option", ["--dense", "--model"])
def test_a_repeated_per_index_flag_is_refused(option):
    """SV7: the second ``--dense tiny=`` used to replace the first without a word."""
    from bm25aug.serve.config import index_specs

    flags = {"--dense": ([], [f"tiny={DENSE}", "tiny=bge-small-en-v1.5"]),
             "--model": (["tiny=general", "tiny=checkpoints/x"], [])}[option]
    with pytest.raises(UserError, match=f"{option} is given twice for index 'tiny'") as e:
        index_specs(["tiny=indexes/tiny.flat"], *flags)
    assert "\n" not in str(e.value) and "fix:" in str(e.value)
    assert index_specs(["a=indexes/a.flat", "b=indexes/b.flat"], None, [f"a={DENSE}", f"b={DENSE}"])[1].dense == DENSE


def test_the_fusion_class_refuses_a_weight_with_rrf():
    """H2: ``Fusion("rrf", weight=0.5)`` used to drop the weight; the class refuses it as the commands do,
    and the default weight is still interpolation's."""
    from bm25aug.search.hybrid import DEFAULT_FUSION, INTERPOLATION_WEIGHT, Fusion

    for build in (lambda: Fusion("rrf", weight=0.5), lambda: Fusion(method="rrf", weight=0.4),
                  lambda: Fusion.given("rrf", 0.5)):
        with pytest.raises(UserError, match="a fusion weight is interpolation's") as e:
            build()
        assert "\n" not in str(e.value)
    assert Fusion("rrf").describe() == "rrf (rrf_k 60, depth 1000)" and Fusion("rrf").weights == (1.0, 1.0)
    assert DEFAULT_FUSION.weight == Fusion("interpolation").weight == INTERPOLATION_WEIGHT
    assert Fusion("interpolation", 0.25).weights == (0.25, 0.75)


def test_method_dense_with_a_fusion_flag_says_what_is_true(tmp_path):
    """EV3: ``--method dense`` *is* the dense peer; what it lacks is a fusion."""
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    with pytest.raises(UserError) as e:
        evaluate(EvalConfig(dataset="scifact", method="dense", fusion_weight=0.5))
    said = str(e.value)
    assert "uses neither" not in said and "--method dense ranks by the dense peer alone" in said
    assert "fix: drop --fusion-weight, or use --method hybrid" in said


@pytest.fixture(scope="module")
def searchers(tmp_path_factory):
    """Every kind of searcher, on one small flat index."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.search.dense import DenseSearcher
    from bm25aug.search.feedback import RM3Searcher
    from bm25aug.search.hybrid import Fusion, HybridSearcher
    from bm25aug.search.peers import ExpansionSearcher
    from bm25aug.search.splade import SpladeSearcher

    root = tmp_path_factory.mktemp("six")
    flat = ensure_index(load_dataset(str(write_beir(root / "tiny"))), "flat", root / "indexes")
    dense, augmented = DenseSearcher(flat, DENSE), AugmentedSearcher.from_pretrained("general", flat)
    return {"bm25": BM25Searcher(flat), "augmented": augmented,
            "rm3": ExpansionSearcher(flat, "rm3"), "rocchio": ExpansionSearcher(flat, "rocchio"),
            "bm25-rm3 (ours)": RM3Searcher(BM25Searcher(flat)), "augmented-rm3": RM3Searcher(augmented),
            "dense": dense, "splade": SpladeSearcher(flat),
            "hybrid": HybridSearcher(BM25Searcher(flat), dense, Fusion(depth=5))}


def test_every_searcher_class_is_in_the_loop(searchers):
    """Each class of ``bm25aug.search`` that ranks (has ``search_arrays``) gets ``Searches``, and the
    loop below runs one of each: a new searcher cannot miss ``search`` or the loop unnoticed."""
    import importlib
    import inspect
    import pkgutil

    import bm25aug.search
    from bm25aug.search.hits import Searcher, Searches

    ranking = set()
    for info in pkgutil.iter_modules(bm25aug.search.__path__):
        module = importlib.import_module(f"bm25aug.search.{info.name}")
        ranking |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                    if c.__module__ == module.__name__ and "search_arrays" in vars(c) and c is not Searcher}
    assert ranking and all(issubclass(c, Searches) for c in ranking), [c for c in ranking if not issubclass(c, Searches)]
    concrete = {c for c in ranking if c.__name__ != "ExactSearcher"}  # the dense and SPLADE peers' shared base
    assert concrete <= {type(s) for s in searchers.values()}, concrete - {type(s) for s in searchers.values()}


def test_every_searcher_answers_search_and_batch_search_alike(searchers):
    """H10: ``DenseSearcher`` (and RM3's, Rocchio's and SPLADE's searchers) had no ``search``. Every
    searcher answers ``search`` and ``batch_search`` as its arrays say, one query or many, on one
    thread or two, and refuses mismatched query ids in one line."""
    from bm25aug.search.hits import Hit, Searcher

    queries, qids = ["cat on a mat", "rain and wind", "electric car", ""], ["q1", "q4", "q8", "blank"]
    for name, searcher in searchers.items():
        assert isinstance(searcher, Searcher), name
        one = searcher.search(queries[0], 3)
        assert one and all(isinstance(hit, Hit) for hit in one), name
        assert one == searcher.hits(searcher.search_arrays(queries[0], 3)), name
        by_one = {qid: searcher.search(q, 3) for qid, q in zip(qids, queries)}
        assert by_one["blank"] == [], name
        for threads in (1, 2):
            run = searcher.batch_search(queries, qids, k=3, threads=threads)
            assert list(run) == qids, name
            for qid in qids:  # float rounding of a batch's encoding may reorder nothing here
                assert [h.docid for h in run[qid]] == [h.docid for h in by_one[qid]], (name, threads, qid)
                assert [h.score for h in run[qid]] == pytest.approx([h.score for h in by_one[qid]], rel=1e-5)
        with pytest.raises(UserError) as e:
            searcher.batch_search(queries, qids[:2], k=3)
        assert "\n" not in str(e.value), name


def test_the_wheel_holds_every_file_the_package_tracks(tmp_path):
    """Item 7: ``pip wheel .`` left out ``opensearch/node/opensearch-{2,3}/Engine.java``, so a
    non-editable install could not start a cluster. Every file under ``bm25aug/`` that git tracks
    and that is not Python is inside the wheel."""
    tracked = subprocess.run(["git", "ls-files", "bm25aug"], cwd=REPO, capture_output=True, text=True, check=True)
    wanted = {p for p in tracked.stdout.split() if not p.endswith(".py")}
    assert {"bm25aug/opensearch/node/opensearch-3/Engine.java", "bm25aug/models/general/model.int8.onnx"} <= wanted
    source = tmp_path / "source"  # a copy of the working tree: pip builds in the folder it is given (build/)
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                            check=True)
    for path in listed.stdout.splitlines():
        if (REPO / path).is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / path, source / path)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("bm25aug-*.whl")
    with zipfile.ZipFile(wheel) as z:
        missing = sorted(wanted - set(z.namelist()))
    assert not missing, f"the wheel lacks {missing}"


def test_no_test_writes_into_the_repositorys_indexes(tmp_path):
    """Item 8: ``test_java``'s ``bm25aug index`` ran in the checkout and left its lock file in the
    repository's ``indexes/`` (the default index root is the working folder's ``indexes/``); it runs in
    its own folder now. No lock file is tracked, and ``.gitignore`` keeps it so."""
    tracked = subprocess.run(["git", "ls-files", "indexes"], cwd=REPO, capture_output=True, text=True, check=True)
    assert [p for p in tracked.stdout.split() if p.endswith(".lock")] == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "indexes/.anything.flat.lock"], cwd=REPO)
    assert ignored.returncode == 0, ".gitignore no longer names the index locks"
