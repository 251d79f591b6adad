"""A model folder is portable and says what it is: no path of this machine in it, a model card
(README.md), and a copy elsewhere searches exactly as the original."""

import shutil

from bm25aug.tokenization import OFFLINE_ENCODER


def test_a_copied_model_folder_searches_identically_and_carries_its_card(tiny_wp, flat_model, tmp_path):
    from bm25aug.search.augmented import AugmentedSearcher

    _, _, flat = tiny_wp
    original = tmp_path / "here" / "model"
    flat_model.save_pretrained(original)
    texts = {p.name: p.read_text() for p in original.rglob("*") if p.suffix in (".json", ".md", ".txt")}
    assert not [name for name, text in texts.items() if "site-packages" in text or str(tmp_path) in text]
    card = (original / "README.md").read_text()
    assert OFFLINE_ENCODER in card and "flat: Lucene's default English analyzer" in card
    queries = ["cat on a mat", "big cats and lions", "electric car"]
    expected = [AugmentedSearcher.from_pretrained(original, flat).search(q, 5) for q in queries]
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(original, moved, ignore=shutil.ignore_patterns("onnx"))
    shutil.rmtree(tmp_path / "here")
    assert [AugmentedSearcher.from_pretrained(moved, flat).search(q, 5) for q in queries] == expected


def test_a_trained_model_card_names_its_recipe_data_and_dev_selection(tiny_wp, tmp_path):
    from bm25aug.train.arguments import TrainConfig
    from bm25aug.train.trainer import Trainer

    ds, _, flat = tiny_wp
    config = TrainConfig(dataset="tiny", output_dir=str(tmp_path / "run"), batch_size=4, dev_size=2, negative_depth=3,
                         threads=1, epochs=1, significance=0)
    Trainer(config, ds, flat).train()
    card = (tmp_path / "run" / "best" / "README.md").read_text()
    assert "Trained on `tiny` (7 training queries)" in card
    assert "Dev selection on the seeded slice of train (seed 13, 1 queries): ndcg@10" in card
    assert '"negative_depth": 3' in card and "output_dir" not in card


def test_one_loader_finds_a_model_by_what_its_folder_records(tiny_wp, flat_model, tmp_path):
    """``bm25aug.model.loading``: a run folder means its best/, the packaged name its package, and
    a folder's kind is its config's ``query_side`` (a config saved before the field existed reads as
    contextual), never a guess from file names: the same term lists whichever way it is named."""
    import json

    import pytest

    from bm25aug.errors import UserError
    from bm25aug.model import packaged
    from bm25aug.model.config import CONFIG_NAME
    from bm25aug.model.loading import kind, load_encoder, locate
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder

    run = tmp_path / "run"
    flat_model.save_pretrained(run / "best")
    assert locate(run) == run / "best" and locate(run / "best") == run / "best"
    assert locate("general") == packaged.PACKAGED_ROOT / "general" and kind(locate("general")) == "packaged"
    assert kind(run / "best") == "contextual"
    query = "big cats and lions"
    expected = load_encoder(run / "best", "torch-fp32").encode(query)
    assert load_encoder(run, "torch-fp32").encode(query) == expected
    assert isinstance(load_encoder(run), OnnxQueryEncoder)
    legacy = tmp_path / "legacy"
    shutil.copytree(run / "best", legacy, ignore=shutil.ignore_patterns("onnx"))
    config = json.loads((legacy / CONFIG_NAME).read_text())
    del config["query_side"]  # as written before the field existed
    (legacy / CONFIG_NAME).write_text(json.dumps(config))
    assert kind(legacy) == "contextual" and load_encoder(legacy, "torch-fp32").encode(query) == expected
    config["query_side"] = "reweighter"  # the record decides, whatever files the folder holds
    (legacy / CONFIG_NAME).write_text(json.dumps(config))
    assert kind(legacy) == "reweighter"
    with pytest.raises(UserError, match="cannot be read.*fix"):
        load_encoder(legacy)
    with pytest.raises(UserError, match="is not a bm25aug checkpoint .*fix"):
        locate(tmp_path / "empty")
