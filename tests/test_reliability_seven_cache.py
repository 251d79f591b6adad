"""The corpus embeddings cache and the ONNX export cache (hostile-user probe, round seven: E5, E7,
OX1, OX4): a disk that fills while the ``.npy`` is written is the one-line full-disk error (no
crash, no crash log, no temporary left); a FIFO in place of the cache's record is an unreadable
record, encoded again, never waited on; a read-only cache serves the export it holds; an export
prints nothing of ONNX Runtime's advice.

The full and read-only disks are real ones (a small tmpfs, a read-only bind mount), which only
root may mount: these tests run as root (as CI does) and fail, never skip, where they cannot."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from test_dense_stream import Hashed, cache  # noqa: F401 (a fixture)

FULL_DISK = "error: No space left on device; fix: free space on that disk, or write somewhere else"
ADVICE = "pre-processing before quantization"


def need_root() -> None:
    assert os.geteuid() == 0, "this test mounts a tmpfs or a read-only bind mount: run it as root (CI does)"


@contextmanager
def mounted(*commands: list[str]):
    """Run the mount ``commands`` (each on the first one's target), then unmount that target."""
    need_root()
    subprocess.run(commands[0], check=True, capture_output=True)
    try:
        for command in commands[1:]:
            subprocess.run(command, check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", commands[0][-1]], check=True)


# A fake dense model of wide vectors (so that a few documents' chunks and .npy are each hundreds of
# KB) encodes the tiny corpus into the cache at argv[2], chunk by chunk; errors end as the CLI ends them.
ENCODE = """
import sys
import numpy as np
from bm25aug.errors import UserError, os_error_message


class Wide:
    name, dim, digest = "wide", 8192, "0" * 32
    corpus_encoder = property(lambda self: self)

    def encode_documents(self, texts):
        return np.full((len(texts), self.dim), self.dim ** -0.5, np.float32)


from bm25aug.dense.embeddings import corpus_embeddings
from bm25aug.lucene.reader import LuceneIndex

try:
    rows, _ = corpus_embeddings(LuceneIndex(sys.argv[1]), Wide(), chunk=4)
except OSError as e:
    sys.exit(print(f"error: {os_error_message(e)}", file=sys.stderr) or 2)
print(rows.shape)
"""


def test_a_disk_that_fills_while_the_npy_is_written_is_the_one_line_full_disk_error(tiny_wp, tmp_path):
    """E7: the 8 documents' two chunks (128 KB each) fit on a 400 KB disk, their 256 KB ``.npy`` does
    not. It was written through a mapping, whose first page with no room killed the process with
    SIGBUS (the JVM's crash log in the working folder, the sparse temporary left filling the disk);
    now it is the full-disk line of a chunk's write, with no temporary left, and the same encoding
    ends once the disk has room, resuming from the kept chunks."""
    disk, work = tmp_path / "disk", tmp_path / "work"
    disk.mkdir()
    work.mkdir()
    env = {**os.environ, "BM25AUG_CACHE": str(disk)}
    with mounted(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)]):
        run = subprocess.run([sys.executable, "-c", ENCODE, str(tiny_wp[2]), str(disk)], cwd=work, env=env,
                             capture_output=True, text=True, timeout=120)
        assert (run.returncode, run.stderr.strip().splitlines()[-1:]) == (2, [FULL_DISK]), run.stdout + run.stderr
        assert "Traceback" not in run.stderr and not list(work.iterdir())  # no hs_err_pid*.log
        assert not [p for p in disk.rglob("*") if ".tmp." in p.name]
        assert sorted(p.name for p in (disk / "dense").glob("*.partial/chunk-*")) == ["chunk-000000000.npz",
                                                                                     "chunk-000000004.npz"]
        subprocess.run(["mount", "-o", "remount,size=2m", str(disk)], check=True)
        again = subprocess.run([sys.executable, "-c", ENCODE, str(tiny_wp[2]), str(disk)], cwd=work, env=env,
                               capture_output=True, text=True, timeout=120)
        assert (again.returncode, again.stdout.strip()) == (0, "(8, 8192)"), again.stderr
        assert not list((disk / "dense").glob("*.partial"))


def test_the_streamed_npy_is_the_file_np_save_writes(tmp_path):
    """The ``.npy`` streamed from the chunks has np.save's bytes (format and header unchanged)."""
    from bm25aug.dense.embeddings import DenseStore

    whole = np.random.default_rng(0).standard_normal((10, 24)).astype(np.float32)
    np.save(tmp_path / "saved.npy", whole)
    DenseStore().write(tmp_path / "streamed.npy", iter([whole[:4], whole[4:8], whole[8:]]), 10, 24)
    assert (tmp_path / "streamed.npy").read_bytes() == (tmp_path / "saved.npy").read_bytes()


def within(call, fifo: Path, seconds: float = 30):
    """``call()``'s result, failing the test where it does not return within ``seconds`` (a reader
    waiting on ``fifo``: a writer lets it go first, so nothing stays blocked)."""
    got = []
    thread = threading.Thread(target=lambda: got.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=seconds)
        pytest.fail(f"waited on the FIFO {fifo}")
    return got[0]


def fifo_in_place(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


def test_a_fifo_in_place_of_the_cache_record_is_encoded_again_not_waited_on(tiny_wp, cache):
    """E5: ``dense.json`` a FIFO blocked the next search for ever (nothing ever writes to it). It is
    now what a damaged record is: unreadable, so the corpus is encoded again (the cache is
    bm25aug's own, as a FIFO in place of ``embeddings.npy`` or its checksum record already was), and
    the FIFO is replaced by a record."""
    from bm25aug.dense.embeddings import INFO, corpus_embeddings
    from bm25aug.lucene.reader import LuceneIndex
    from conftest import Counting

    index = LuceneIndex(tiny_wp[2])
    first, _ = corpus_embeddings(index, Hashed(dim=16))
    (record,) = cache.glob(f"*/{INFO}")
    model = Counting(Hashed(dim=16))
    got, _ = within(lambda: corpus_embeddings(index, model), fifo_in_place(record))
    assert model.documents == len(tiny_wp[0].corpus) and record.is_file()
    assert np.array_equal(np.asarray(got), np.asarray(first))


def test_a_fifo_in_place_of_an_interrupted_encodings_plan_is_a_damaged_plan(tiny_wp, cache):
    """An interrupted encoding's ``plan.json`` a FIFO is read as a damaged plan is (its chunks
    dropped, the corpus encoded again), never waited on."""
    from bm25aug.dense.corpus_cache import PLAN
    from bm25aug.dense.embeddings import corpus_embeddings
    from bm25aug.lucene.reader import LuceneIndex
    from conftest import Counting, Interrupted

    index = LuceneIndex(tiny_wp[2])
    with pytest.raises(Interrupted):
        corpus_embeddings(index, Counting(Hashed(dim=16), fail_after=1), chunk=2)
    (plan,) = cache.glob(f"*.partial/{PLAN}")
    model = Counting(Hashed(dim=16))
    got, _ = within(lambda: corpus_embeddings(index, model, chunk=2), fifo_in_place(plan))
    assert model.documents == len(tiny_wp[0].corpus) and got.shape == (model.documents, 16)
    assert not plan.parent.exists()  # the encoding ended: its chunks dropped


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    """An untrained two-layer model, saved (its export takes a few seconds)."""
    from bm25aug.model.augmenter import QueryAugmenter

    path = tmp_path_factory.mktemp("seven") / "small"
    QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=2).save_pretrained(path)
    return path


@pytest.fixture
def onnx_cache(tmp_path, monkeypatch) -> Path:
    import bm25aug.model.onnx_encoder as onnx_encoder

    monkeypatch.setattr(onnx_encoder, "CACHE_DIR", tmp_path / "cache" / "onnx")
    return tmp_path / "cache" / "onnx"


def copy_of(checkpoint: Path, to: Path) -> Path:
    """A copy of a model folder, without its export."""
    import shutil

    return Path(shutil.copytree(checkpoint, to, ignore=shutil.ignore_patterns("onnx")))


def test_an_export_prints_nothing_of_onnx_runtimes_quantization_advice(small_checkpoint, onnx_cache, tmp_path,
                                                                       capfd, caplog):
    """OX1: every first export printed ONNX Runtime's ``Please consider to run pre-processing before
    quantization`` (a warning on the root logger) to the user. It says nothing of theirs: silenced,
    and only it (another warning of that moment still shows)."""
    from bm25aug.model.loading import load_encoder

    checkpoint = copy_of(small_checkpoint, tmp_path / "ckpt")
    with caplog.at_level(logging.WARNING):
        assert "cats" in load_encoder(checkpoint, "onnx-int8").encode("cats and dogs")
    out, err = capfd.readouterr()
    assert ADVICE not in out + err + caplog.text
    assert len(list(onnx_cache.glob("*/model.int8.onnx"))) == 1  # exported (into the cache), not found
    logging.getLogger().warning("another warning")
    assert "another warning" in caplog.text


def test_a_read_only_cache_serves_the_export_it_holds(small_checkpoint, onnx_cache, tmp_path, monkeypatch):
    """OX4: a read-only cache (a read-only bind mount: root's permissions do not stop it) holding
    a model's export refused it for want of a lock (``Read-only file system``: only a cache this
    user may not write was meant). It is read, without a lock; a model it does not hold is still
    the read-only error, naming the lock file (the CLI's ``fix: write to a disk that is not
    read-only``)."""
    import bm25aug.model.onnx_encoder as onnx_encoder
    from bm25aug.model.augmenter import QueryAugmenter
    from bm25aug.model.loading import load_encoder

    exported = copy_of(small_checkpoint, tmp_path / "exported")
    expected = load_encoder(exported, "onnx-int8").encode("cats and dogs")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    with mounted(["mount", "--bind", str(onnx_cache.parent), str(read_only)],
                 ["mount", "-o", "remount,ro,bind", str(read_only)]):
        monkeypatch.setattr(onnx_encoder, "CACHE_DIR", read_only / "onnx")
        cached = copy_of(small_checkpoint, tmp_path / "cached")
        assert load_encoder(cached, "onnx-int8").encode("cats and dogs") == expected
        copied, made = (folder / "onnx" / "model.int8.onnx" for folder in (cached, exported))
        assert copied.read_bytes() == made.read_bytes()  # the cache's, copied into the model folder
        other = tmp_path / "other"
        QueryAugmenter.from_encoder(target="wp", weight_floor=0.5, layers=2).save_pretrained(other)
        with pytest.raises(OSError) as error:
            load_encoder(other, "onnx-int8")
        assert error.value.errno == errno.EROFS and str(error.value.filename).endswith(".lock"), error.value
        assert not (other / "onnx").exists()
