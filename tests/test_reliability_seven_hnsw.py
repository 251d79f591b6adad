"""The HNSW index's folders and build command (hostile-user probe, round seven: N5, N6, N8, N10,
N12, N13, N16, N17, N22, and the snappy library each build left in the temporary folder).

A damaged folder (Lucene files deleted, cut short, or another corpus's under an intact record; an
unreadable record; a FIFO in its place) is one line naming the folder and a build command, and that
very command replaces it; a healthy index is kept as it is. The build command refuses bad threads
and a cluster's URL at once, ends in one line on a full disk (no temporary left), and serves an
index already built from a read-only cache. The corpus: 40 generated documents, ``Hashed`` vectors
(tests/test_dense_stream.py), so the real Anserini build takes about a second."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import bm25aug.search.dense  # noqa: F401  (imported before `command` replaces the model loader it binds)
from bm25aug.errors import UserError
from test_dense_stream import Hashed, make_index, same
from test_reliability_seven_cache import FULL_DISK, mounted, within

N, DIM = 40, 16
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The corpus, its model and its HNSW index in a temporary cache (``pristine``: a copy of the
    index folder), and two other corpora's HNSW indexes: 30 documents, and 40 documents of which
    5 have ids the corpus lacks."""
    from bm25aug.dense import embeddings, hnsw

    root = tmp_path_factory.mktemp("hnsw7")
    saved, embeddings.CACHE_ROOT = embeddings.CACHE_ROOT, root / "cache"
    _, index = make_index(root / "main", N)
    model = Hashed(DIM)
    folder = hnsw.build_hnsw(index, model)
    shutil.copytree(folder, root / "pristine")
    others = {name: hnsw.build_hnsw(make_index(root / name, n, seed=5, duplicates=extra)[1], model, out=root / f"{name}.hnsw")
              for name, n, extra in (("fewer", 30, 0), ("other_ids", N, 5))}
    yield SimpleNamespace(root=root, index=index, model=model, folder=folder, others=others)
    embeddings.CACHE_ROOT = saved


@pytest.fixture
def command(built, monkeypatch):
    """``run(argv)``: ``python -m bm25aug.dense.hnsw`` in this process, its model name loading
    the test's model; the exit code."""
    from bm25aug.dense import hnsw, loading

    real = loading.load_dense_model
    monkeypatch.setattr(loading, "load_dense_model", lambda spec=None, *args, **options: built.model if spec in (
        None, built.model.name) else real(spec, *args, **options))
    return hnsw.main


def fresh(built, folder: Path | None = None) -> Path:
    """A copy of the healthy index at ``folder`` (the cache's by default), in place of what is there."""
    folder = folder or built.folder
    if os.path.lexists(folder):
        shutil.rmtree(folder)
    shutil.copytree(built.root / "pristine", folder)
    return folder


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text and "; fix: " in text, text
    return text


def refusal(call) -> str:
    """The one line ``call()`` raises ("" when it raises nothing): for a call ``within`` runs."""
    try:
        call()
    except UserError as e:
        return str(e)
    return ""


def searches_right(built, search) -> None:
    """A search of the index as ``search`` says: the graph's (all 40 documents are candidates), so
    the same top 5 as exact search, bit for bit."""
    from bm25aug.search.dense import DenseSearcher

    searcher = DenseSearcher(built.index, built.model, search=search)
    assert searcher.search_kind == "hnsw"
    exact = DenseSearcher(built.index, built.model, search="exact")
    for query in ("query 1", "cat river"):
        assert same(searcher.search_arrays(query, 5), exact.search_arrays(query, 5))


def follow_the_fix(message: str, run, capsys) -> Path:
    """Run the build command ``message`` names as its fix (``python -m bm25aug.dense.hnsw ...``)."""
    found = re.search(r"fix: build it again with `python -m bm25aug\.dense\.hnsw ([^`]*)`, which replaces it", message)
    assert found, message
    capsys.readouterr()
    assert run(shlex.split(found[1])) == 0
    return Path(capsys.readouterr().out.strip())


def only_record(folder: Path) -> None:
    for path in folder.iterdir():
        if path.name != "hnsw.json":
            path.unlink()


def damage(built, folder: Path, how: str) -> None:
    if how == "segments deleted":
        next(folder.glob("segments_*")).unlink()
    elif how == "vectors cut in half":
        vec = next(folder.glob("*.vec"))
        os.truncate(vec, vec.stat().st_size // 2)
    elif how == "only the record left":
        only_record(folder)
    else:  # another corpus's Lucene files under this corpus's record
        only_record(folder)
        source = built.others[how]
        for path in source.iterdir():
            if path.name != "hnsw.json":
                shutil.copy(path, folder / path.name)


@pytest.mark.parametrize("how", ["segments deleted", "vectors cut in half", "only the record left", "fewer",
                                 "other_ids"])
def test_damaged_lucene_files_are_one_line_whose_build_replaces_them(built, command, capsys, how):
    """N5, N6, N10: under an intact record, Lucene files deleted, cut short or of another corpus (30
    documents; 40 with 5 ids this corpus lacks) were a 26-line Java traceback, or searched silently
    (30 documents of 40), and the build command answered rc=0 and built nothing (the record matched).
    Now the search is one line naming the folder and the build that replaces it, and that build does."""
    from bm25aug.search.dense import DenseSearcher

    damage(built, fresh(built), how)
    with pytest.raises(UserError) as error:
        DenseSearcher(built.index, built.model, search="hnsw").search_arrays("query 1", 5)
    message = one_line(error)
    assert message.startswith(str(built.folder)), message
    assert follow_the_fix(message, command, capsys) == built.folder
    searches_right(built, "hnsw")


@pytest.mark.parametrize("record", ["not json", "[]", "a FIFO"])
@pytest.mark.parametrize("where", ["cache", "out"])
def test_an_unreadable_record_is_one_line_whose_build_replaces_it(built, command, capsys, record, where):
    """N8, N12: ``hnsw.json`` not JSON, a list or a FIFO. The build stopped with the search's own
    line (it read the record before replacing the folder), so its fix never worked; a FIFO read as
    "no hnsw.json". Now the record is read only as a regular file, and the build replaces the
    folder: the cache's, and one elsewhere holding nothing but the record and Lucene's files."""
    from bm25aug.search.dense import DenseSearcher

    folder = fresh(built, built.folder if where == "cache" else built.root / "mine.hnsw")
    path = folder / "hnsw.json"
    if record == "a FIFO":
        path.unlink()
        os.mkfifo(path)
    else:
        path.write_text(record)
    message = within(lambda: refusal(lambda: DenseSearcher(built.index, built.model, search=folder)), path)
    assert "\n" not in message and message.startswith(str(path)) and ("a FIFO, not a regular file" in message) == (record == "a FIFO")
    assert within(lambda: follow_the_fix(message, command, capsys), path) == folder
    searches_right(built, folder)


def test_the_build_keeps_a_healthy_index_and_refuses_a_folder_not_its_own(built, command, capsys):
    """N1 stays: a healthy index is kept as it is (not rebuilt). A folder whose unreadable record sits
    beside a file no build writes is not bm25aug's to replace: refused in one line, untouched."""
    from bm25aug.dense import hnsw

    record = (fresh(built) / "hnsw.json").read_bytes()
    stamps = {p.name: p.stat().st_mtime_ns for p in built.folder.iterdir()}
    assert command([str(built.index.path)]) == 0 and capsys.readouterr().out.strip() == str(built.folder)
    assert {p.name: p.stat().st_mtime_ns for p in built.folder.iterdir()} == stamps
    assert (built.folder / "hnsw.json").read_bytes() == record
    mine = fresh(built, built.root / "notes.hnsw")
    (mine / "hnsw.json").write_text("not json")
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(UserError) as error:
        hnsw.build_hnsw(built.index, built.model, out=mine)
    assert "notes.txt" in one_line(error) and "will not delete it" in str(error.value)
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "hnsw.json").read_text() == "not json"


@pytest.mark.parametrize("threads", ["0", "-2"])
def test_threads_below_one_are_refused_at_once(built, command, capsys, threads):
    """N16: ``--threads 0`` or ``-2`` was a Java traceback from the indexer's thread pool."""
    from bm25aug.dense import hnsw

    out = built.root / f"threads{threads}"
    assert command([str(built.index.path), "--threads", threads, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --threads {threads} is out of range; fix: pass an integer "
                                               f"from 1 to 1024")
    with pytest.raises(UserError):
        hnsw.build_hnsw(built.index, built.model, out=out, threads=int(threads))
    assert not out.exists()


def test_a_cluster_url_is_named_as_written(command, capsys):
    """N17: a cluster's URL went through ``Path`` (``http:/127.0.0.1:9200/x is not a Lucene index``)."""
    assert command(["http://127.0.0.1:9200/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: http://... is a cluster's index") and "http:/1" not in err and "\n" not in err


def test_a_search_value_is_one_of_three_or_an_existing_folder(built):
    """N13: ``search="HNSW"`` suggested building into a folder named HNSW, and ``search=None`` was
    pathlib's TypeError. A value that names no folder lists the three searches; None is "auto"."""
    from bm25aug.search.dense import DenseSearcher

    fresh(built)
    for value in ("HNSW", "", 5):
        with pytest.raises(UserError) as error:
            DenseSearcher(built.index, built.model, search=value)
        assert "is none of auto, exact, hnsw" in one_line(error) and "--out HNSW" not in str(error.value)
    assert DenseSearcher(built.index, built.model, search=None).search_kind == "exact"  # auto, below EXACT_BELOW


def test_a_full_disk_is_one_line_and_leaves_no_temporary(built, command, capfd, tmp_path, monkeypatch):
    """N22: on a full disk the build was pyarrow's traceback (the Parquet files do not fit), or, with
    room for those, Anserini's logged failure and then Lucene's IndexNotFoundException. 2,048-wide
    vectors: 330 KB of Parquet, as much again for Lucene; 100 KB, then 500 KB free on a 1 MB tmpfs."""
    from bm25aug.dense import embeddings

    wide = Hashed(2048, name="wide")
    embeddings.corpus_embeddings(built.index, wide)  # encoded in the module's cache, not on the disk
    monkeypatch.setattr("bm25aug.dense.loading.load_dense_model", lambda spec=None: wide)
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]):
        for free_kb in (100, 500):
            (disk / "filler").unlink(missing_ok=True)
            room = os.statvfs(disk)
            (disk / "filler").write_bytes(bytes(room.f_bavail * room.f_frsize - free_kb * 1024))
            capfd.readouterr()
            assert command([str(built.index.path), "--out", str(disk / "h")]) == 2
            out, err = capfd.readouterr()
            printed = [line for line in (out + err).splitlines() if not line.startswith("SLF4J(I)")]  # the JVM's start
            assert printed == [FULL_DISK.replace("; fix:", f" ({disk / 'h'}); fix:")], (free_kb, out + err)
            assert sorted(p.name for p in disk.iterdir()) == [".h.lock", "filler"]  # no temporary left


def test_a_read_only_cache_serves_the_index_it_holds(built, command, capsys, tmp_path, monkeypatch):
    """N22: with the index built, a read-only cache failed on taking the build's lock
    (``Read-only file system: .../dense-hnsw/.KEY.lock``); the build now looks before it locks."""
    from bm25aug.dense import embeddings

    fresh(built)
    read_only = tmp_path / "ro"
    read_only.mkdir()
    with mounted(["mount", "--bind", str(embeddings.CACHE_ROOT), str(read_only)],
                 ["mount", "-o", "remount,ro,bind", str(read_only)]):
        monkeypatch.setattr(embeddings, "CACHE_ROOT", read_only)
        assert command([str(built.index.path)]) == 0
        assert capsys.readouterr().out.strip() == str(read_only / "dense-hnsw" / built.folder.name)


BUILD = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from test_dense_stream import Hashed
from bm25aug.dense import embeddings, hnsw
from bm25aug.lucene.reader import LuceneIndex
embeddings.CACHE_ROOT = Path(sys.argv[3])
print(hnsw.build_hnsw(LuceneIndex(sys.argv[2]), Hashed(int(sys.argv[5])), out=sys.argv[4]))
"""


def test_a_build_leaves_nothing_in_the_temporary_folder(built, tmp_path):
    """Issue 74, item 7: each process that built an HNSW index left snappy-java's native library
    (``snappy-1.1.8-*-libsnappyjava.so``, 280 KB) in the JVM's temporary folder (Parquet's reader
    loaded it for the snappy-compressed files). The build runs in a process of its own whose
    temporary folder, Java's and Python's, is an empty one: it stays empty once the process ends."""
    from bm25aug.dense import embeddings

    temporary = tmp_path / "temporary"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "_JAVA_OPTIONS": f"-Djava.io.tmpdir={temporary}"}
    run = subprocess.run([sys.executable, "-c", BUILD, str(TESTS), str(built.index.path), str(embeddings.CACHE_ROOT),
                          str(tmp_path / "new.hnsw"), str(DIM)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and (tmp_path / "new.hnsw" / "hnsw.json").is_file(), run.stderr
    assert not list(temporary.iterdir())
