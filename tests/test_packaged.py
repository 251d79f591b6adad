"""The general model shipped inside the package (issue 51): by name, offline, with no training, on
any flat index, Pyserini's stock ones included; every path ranks alike with it; its files are
checked when it loads; it holds only data whose license lets it ship. `general` is the first
release, `general-1`, cut to its w output (issue 75)."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from bm25aug.errors import UserError
from bm25aug.model import package_build, packaged
from test_reliability import run_cli
from test_stock_index import pyserini_index

QUERIES = ["what causes lions to roar", "electric car battery in a garage", "a cat on the mat"]


@pytest.fixture(scope="module", params=packaged.names())
def general(request):
    """Each packaged model in turn."""
    return packaged.PACKAGED_ROOT / request.param


def test_general_is_shipped_small_with_its_card_and_licenses(general):
    assert general.name in packaged.names()
    record = json.loads((general / packaged.PACKAGE_FILE).read_text())
    size = sum(f.stat().st_size for f in general.iterdir())
    assert record["bytes"] <= size < 64 << 20, size  # small enough for the repository and the wheel
    assert set(record["training_sets"].values()) <= set(packaged.SHIPPABLE)
    card = (general / "README.md").read_text()
    for name, license in record["training_sets"].items():
        assert f"| {name} | {license} |" in card
    assert not (general / "model.safetensors").exists()  # the runtime only
    root = packaged.PACKAGED_ROOT.parents[1]
    for doc in ("README.md", "docs/results.md"):  # the size the docs quote is the recorded one
        assert f"{record['bytes'] / 1e6:.1f} MB" in (root / doc).read_text(), doc


def test_the_packaged_model_searches_a_stock_index_on_every_path_alike(general, tmp_path):
    """AugmentedSearcher, the batch path, the CLI and the server, on an index Pyserini built."""
    assert_every_path_alike(general.name, pyserini_index(tmp_path / "stock.flat"))


def assert_every_path_alike(model: str, stock) -> None:
    """``model`` (a name or a folder) ranks alike through AugmentedSearcher alone and in batch (two
    threads), ``bm25aug search`` and the server."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.serve.config import IndexSpec, ServeConfig
    from bm25aug.serve.service import SearchService

    searcher = AugmentedSearcher.from_pretrained(model, stock)
    alone = [[(h.docid, h.score) for h in searcher.search(q, k=5)] for q in QUERIES]
    assert any(alone)
    batch = searcher.batch_search(QUERIES, [f"q{i}" for i in range(len(QUERIES))], k=5, threads=2)
    assert [[(h.docid, h.score) for h in hits] for hits in batch.values()] == alone
    out = run_cli("-m", "bm25aug.cli", "search", "--index", str(stock), "--model", str(model), "--query", QUERIES[0],
                  "--k", "5", env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    printed = [line.split()[1:3] for line in out.stdout.splitlines() if line.strip()]
    assert printed == [[d, f"{s:.5f}"] for d, s in alone[0]]
    service = SearchService(ServeConfig(indexes=[IndexSpec("s", str(stock), str(model))], workers=1))
    try:
        answer = asyncio.run(service.search("s", QUERIES[0], 5, "augmented"))
        assert [(c["docid"], c["score"]) for c in answer["candidates"]] == alone[0]
    finally:
        service.close()


def test_a_changed_file_or_another_runtime_is_one_line(general, tmp_path):
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder
    from bm25aug.model.loading import load_encoder

    with pytest.raises(UserError, match="ships only its onnx-int8"):
        load_encoder(general.name, "torch-fp32")
    copy = tmp_path / general.name
    shutil.copytree(general, copy)
    data = bytearray((copy / packaged.ONNX_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / packaged.ONNX_FILE).write_bytes(bytes(data))
    with pytest.raises(UserError, match="not the file it shipped"):
        OnnxQueryEncoder.packaged(copy, "onnx-int8")


def test_the_bare_name_is_the_packaged_model(tmp_path, monkeypatch):
    """A folder of that name is used only when written as a path (probe round five, G20)."""
    monkeypatch.chdir(tmp_path)
    assert packaged.resolve("general") == packaged.PACKAGED_ROOT / "general"
    (tmp_path / "general").mkdir()
    assert packaged.resolve("general") == packaged.PACKAGED_ROOT / "general"
    assert packaged.resolve("./general") == packaged.Path("./general")
    assert packaged.resolve("checkpoints/x") == packaged.Path("checkpoints/x")


def test_a_recipe_whose_data_may_not_ship_is_refused_before_training(monkeypatch):
    """The seven-corpus recipe holds SciFact (CC BY-NC): refused before a step is trained."""
    monkeypatch.setitem(packaged.BUILDS, "general", {"recipe": "general", "run": "runs/never"})
    with pytest.raises(UserError, match="scifact \\(CC BY-NC 2.0\\)"):
        package_build.build("general")


def test_a_students_build_distills_its_teacher_and_its_card_says_so():
    """A build with a teacher (a student of a packaged model) is made by bm25aug.train.distill on the
    recipe's queries, not by train.py, and its record and card name the teacher and the shape."""
    from pathlib import Path

    spec = {"recipe": "general-open", "run": "runs/x", "teacher": "general", "layers": 2, "hidden": 128,
            "start": "base", "keep": "", "epochs": 10, "pseudo_queries": 8000, "batch_size": 64, "lr": 0.001,
            "margin": 0.1, "aug_weight": 1.0, "seed": 13, "threads": 1}
    command = package_build.training_command(spec, Path("runs/x"))
    assert command[1:3] == ["-m", "bm25aug.train.distill"]
    flags = dict(zip(command[3::2], command[4::2]))
    assert flags == {"--teacher": "general", "--recipe": "general-open", "--layers": "2", "--hidden": "128",
                     "--start": "base", "--keep": "", "--epochs": "10", "--pseudo-queries": "8000",
                     "--batch-size": "64", "--lr": "0.001", "--margin": "0.1", "--aug-weight": "1.0", "--seed": "13",
                     "--threads": "1", "--output-dir": "runs/x"}
    assert command[-1] == "--resume"
    record = {"name": "small", "recipe": "general-open", "training_sets": {"medquad": "CC BY 4.0"}, "run": "runs/x",
              "dev": {}, "bytes": 7_000_000, "command": "python -m bm25aug.model.packaged small",
              **package_build._student_record(spec)}
    card = package_build._card(record)
    assert "A student of the packaged model `general`: 2 encoder layers 128 wide" in card
    assert "(w and a(q))" in card
    w_only = package_build._card({**record, **package_build._student_record({**spec, "aug_weight": 0.0})})
    assert "(w alone: no a(q) head)" in w_only
    assert "started from" not in card
    fast = package_build._card({**record, **package_build._student_record(packaged.BUILDS["general-fast"])})
    assert "1 encoder layer 384 wide, started from `general`'s own embeddings, w head and layer 0 " in fast
    assert package_build.training_command(packaged.BUILDS["general-1"], Path("runs/y"))[1].endswith("train.py")
    assert package_build._student_record(packaged.BUILDS["general-1"]) == {}


def test_a_students_package_is_cut_only_from_the_run_its_build_names(tmp_path, monkeypatch):
    """``general-fast``'s build (issue 75) refuses a run folder distilled with other settings (any
    of distill's, threads aside), one whose settings cannot be read, and a model with no record of
    its distillation, in one line and before anything is trained or written; the same settings pass."""
    def never(*args, **kwargs):
        raise AssertionError("the build went on past its check")

    monkeypatch.setattr("subprocess.run", never)
    monkeypatch.setattr(package_build, "_write", never)
    spec = {**packaged.BUILDS["general-fast"], "run": str(tmp_path / "run")}
    monkeypatch.setitem(packaged.BUILDS, "general-fast", spec)
    run = tmp_path / "run"
    run.mkdir()
    settings = {"teacher": spec["teacher"], "recipe": spec["recipe"], **{k: spec[k] for k in package_build.STUDENT_SETTINGS}}
    for changed, value in (("keep", "0,1"), ("start", "base"), ("seed", spec["seed"] + 1), ("lr", 0.003),
                           ("teacher", "general-1")):
        (run / "distill.json").write_text(json.dumps({**settings, changed: value}))
        with pytest.raises(UserError, match=f"other settings than general-fast's build \\({changed}\\)"):
            package_build.build("general-fast")
    (run / "distill.json").write_text(json.dumps({k: v for k, v in settings.items() if k != "margin"}))
    with pytest.raises(UserError, match="build \\(margin\\)"):  # a setting the run does not record
        package_build.build("general-fast")
    (run / "distill.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable .*fix: move"):
        package_build.build("general-fast")
    (run / "distill.json").write_text(json.dumps({**settings, "threads": 2}))
    package_build.check_student_run("general-fast", spec, run)  # the same run: passes
    (run / "distill.json").unlink()
    (run / "best").mkdir()
    (run / "best" / "bm25aug_config.json").write_text("{}")
    with pytest.raises(UserError, match="holds a model but no distill.json"):
        package_build.build("general-fast")
    assert sorted(p.name for p in run.iterdir()) == ["best"]  # nothing trained or written


def test_general_is_general_1_without_its_a_head(tmp_path, monkeypatch):
    """``general``'s graph is ``general-1``'s cut to w: the same w bit for bit, no a(q) output and
    none of its head's weights; its term lists are general-1's with a(q) off (a(q) on changes
    them, so the check can fail); the recorded command makes the shipped files again; a cut graph under
    settings that use a(q) is refused in one line."""
    import numpy as np
    import onnx

    from bm25aug.model.loading import load_encoder
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder, onnx_session

    general, first = (packaged.PACKAGED_ROOT / name for name in ("general", "general-1"))
    cut, full = OnnxQueryEncoder.packaged(general, "onnx-int8"), OnnxQueryEncoder.packaged(first, "onnx-int8")
    batch = cut.target.batch(QUERIES + ["a long query " * 40])
    w, a = cut.outputs(batch)
    full_w, full_a = full.outputs(batch)
    assert a is None and np.array_equal(w, full_w) and full_a.shape[1] == len(full.target.live)
    assert [o.name for o in onnx_session(general / packaged.ONNX_FILE).get_outputs()] == ["token_weights"]
    graph = onnx.load(str(general / packaged.ONNX_FILE))
    assert not any(len(full_a[0]) in i.dims for i in graph.graph.initializer)  # no row of the a(q) head
    assert any(len(full_a[0]) in i.dims for i in onnx.load(str(first / packaged.ONNX_FILE)).graph.initializer)

    off = tmp_path / "general-1-no-a"
    shutil.copytree(first, off)
    config = json.loads((off / "bm25aug_config.json").read_text())
    (off / "bm25aug_config.json").write_text(json.dumps({**config, "use_augmentation": False}))
    record = json.loads((off / packaged.PACKAGE_FILE).read_text())
    record["files"]["bm25aug_config.json"] = packaged.file_record(off / "bm25aug_config.json")
    (off / packaged.PACKAGE_FILE).write_text(json.dumps(record))
    texts = QUERIES + ["A deficiency of vitamin B12 decreases blood levels of homocysteine.",
                       "5'-nucleotidase metabolizes 6MP."]
    lists = load_encoder("general", "onnx-int8").encode_batch(texts)
    assert lists == OnnxQueryEncoder.packaged(off, "onnx-int8").encode_batch(texts)
    assert full.encode_batch(texts) != lists  # general-1's a(q) changes these queries' term lists

    root = tmp_path / "models"
    shutil.copytree(first, root / "general-1")
    monkeypatch.setattr(package_build, "PACKAGED_ROOT", root)
    package_build.build("general")
    shipped = json.loads((general / packaged.PACKAGE_FILE).read_text())
    assert json.loads((root / "general" / packaged.PACKAGE_FILE).read_text())["files"] == shipped["files"]

    wrong = tmp_path / "cut-with-a"
    shutil.copytree(general, wrong)
    (wrong / "bm25aug_config.json").write_text(json.dumps(config))
    record = json.loads((wrong / packaged.PACKAGE_FILE).read_text())
    record["files"]["bm25aug_config.json"] = packaged.file_record(wrong / "bm25aug_config.json")
    (wrong / packaged.PACKAGE_FILE).write_text(json.dumps(record))
    with pytest.raises(UserError, match="outputs only token_weights, and its model's settings use a"):
        OnnxQueryEncoder.packaged(wrong, "onnx-int8")
