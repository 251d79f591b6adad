"""Defaults are written once: the training dataclass, the command line generated from it, the
model's own config, BM25's k1 and b, and the recipes (data files) all agree."""

import inspect
from dataclasses import fields
from pathlib import Path

import pytest

from bm25aug import recipes
from bm25aug.cli import build_parser
from bm25aug.errors import UserError
from bm25aug.bm25_defaults import B, K1
from bm25aug.model.augmenter import AugmenterConfig
from bm25aug.train.arguments import TrainConfig, default, from_args, saved_value


def _train(*argv: str) -> TrainConfig:
    args = build_parser().parse_args(["train", *argv])
    return from_args(args, "+".join(args.dataset), Path("checkpoints"))


def test_the_command_line_without_flags_is_the_dataclass():
    got, want = _train("--dataset", "mycorpus"), TrainConfig(dataset="mycorpus", output_dir="checkpoints/mycorpus")
    assert got == want


def test_each_flag_shows_its_real_default_and_the_recipes_that_change_it():
    train = next(a for a in build_parser()._subparsers._group_actions[0].choices["train"]._actions
                 if a.dest == "epochs")
    assert f"(default: {default('epochs')})" in train.help
    assert "scifact 20" in train.help and "nq 45" in train.help


def test_the_model_config_agrees_with_the_trainer():
    """Every setting the model keeps has one default; ``pooling`` and ``encoder`` are None in the
    trainer because they are resolved from the encoder (its pretraining pooling, the offline one)."""
    model = AugmenterConfig()
    shared = {f.name for f in fields(AugmenterConfig)} & {f.name for f in fields(TrainConfig)}
    assert {"target", "weight_floor", "aug_threshold", "aug_layer", "aug_init", "use_weights"} <= shared
    for name in shared - {"pooling", "encoder"}:
        assert getattr(model, name) == default(name), name
    assert (model.target, model.weight_floor) == ("flat", 1.0)


def test_a_trained_models_config_is_the_trainers(offline_model):
    """What the trainer builds from a default config carries the same settings."""
    from bm25aug.model.augmenter import QueryAugmenter

    c = TrainConfig()
    model = QueryAugmenter.from_encoder(c.encoder, c.encoder_layers, target=c.target, weight_floor=c.weight_floor,
                                        aug_threshold=c.aug_threshold, aug_layer=c.aug_layer, aug_init=c.aug_init)
    for name in ("target", "weight_floor", "aug_threshold", "aug_layer", "aug_init", "use_weights",
                 "use_augmentation", "max_query_length"):
        assert getattr(model.config, name) == getattr(c, name), name


def test_bm25_parameters_are_defined_once():
    from bm25aug.eval.evaluate import EvalConfig
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.train.torch_bm25 import BM25Params

    parser = build_parser()
    for command in ("eval", "search"):
        args = parser.parse_args([command, "--dataset", "x"] if command == "eval" else [command, "--index", "i",
                                                                                       "--query", "q"])
        assert (args.k1, args.b) == (K1, B)
    assert (EvalConfig(dataset="x").k1, EvalConfig(dataset="x").b) == (K1, B) == (TrainConfig().k1, TrainConfig().b)
    assert (BM25Params().k1, BM25Params().b) == (K1, B)
    for fn in (BM25Searcher.__init__, AugmentedSearcher.from_pretrained):
        params = inspect.signature(fn).parameters
        assert (params["k1"].default, params["b"].default) == (K1, B)


def test_recipes_are_data_and_layer_in_order():
    names = set(f.name for f in fields(TrainConfig))
    for name in recipes.names():
        assert recipes.settings(name).keys() <= names, name
        assert recipes.description(name)
    assert _train("--dataset", "scifact").epochs == 20  # the dataset's own recipe
    assert _train("--dataset", "scifact", "--epochs", "6").epochs == 6  # then the flags
    layered = _train("--dataset", "squad", "--recipe", "first-release")
    assert (layered.epochs, layered.batch_size, layered.target, layered.ema_decay) == (3, 64, "wp", 0.0)
    with pytest.raises(UserError, match="unknown recipe"):
        recipes.settings("nope")


def test_old_conditions_name_the_recipe_they_were_measured_with():
    """``--recipe first-release`` is the flags that undid today's defaults before, and also the
    random negatives SciFact's recipe gained after those rows were measured."""
    old = _train("--dataset", "scifact", "--target", "wp", "--weight-floor", "0", "--epochs", "6",
                 "--ema-decay", "0", "--flops", "0", "--significance", "0", "--random-negatives", "0")
    assert _train("--dataset", "scifact", "--recipe", "first-release", "--epochs", "6") == old
    yaml_text = (Path(__file__).resolve().parents[1] / "bm25aug" / "reproduce" / "reproductions.yaml").read_text()
    assert "--ema-decay 0" not in yaml_text and "--weight-floor 0" not in yaml_text


def test_settings_an_old_run_or_model_predates_read_as_the_first_release(tmp_path):
    assert saved_value({}, "target") == "wp" and saved_value({}, "lam") == default("lam")
    config = AugmenterConfig(target="wp", weight_floor=0.0).__dict__
    old = {k: v for k, v in config.items() if k not in ("target", "weight_floor")}
    (tmp_path / "bm25aug_config.json").write_text(__import__("json").dumps(old))
    loaded = AugmenterConfig.load(tmp_path)
    assert (loaded.target, loaded.weight_floor) == ("wp", 0.0)
