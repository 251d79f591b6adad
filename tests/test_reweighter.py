"""The inference-free reweighter (issue 51, ``general-static``): what is served is what was fitted,
any word gets a weight from its pieces, a damaged folder is one line, it never adds a term, and it
ranks alike on every path."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from bm25aug.errors import UserError
from bm25aug.model import packaged
from bm25aug.model.reweighter import WEIGHTS_FILE, Reweighter
from bm25aug.train import reweighter as fitting

TEXTS = ["what are the symptoms of glaucoma ?", "who wrote the declaration of independence",
         "battery life of this phone is great", "is it safe to take aspirin daily", "zyxoflux blorptide reactor"]


@pytest.fixture(scope="module")
def small_fit(tmp_path_factory):
    """A reweighter fitted in seconds: the packaged contextual model labels a few texts."""
    from bm25aug.model.onnx_encoder import load_encoder

    teacher = load_encoder("general")
    labels = fitting.teacher_labels(teacher, TEXTS * 4, tmp_path_factory.mktemp("labels") / "labels.json")
    reader, vocabulary = fitting.featurizer(teacher)
    examples = fitting.Examples(reader, TEXTS * 4, labels)
    settings = fitting.FitSettings(dim=8, hidden=16, epochs=3, batch=8)
    fitted = fitting.fit(examples, vocabulary.shape[1], settings, progress=False)
    folder = tmp_path_factory.mktemp("fit") / "model"
    folder.mkdir()
    from copy import deepcopy

    from bm25aug.model.reweighter import write_folder

    write_folder(folder, fitting.tables(fitted, vocabulary), packaged.PACKAGED_ROOT / "general", deepcopy(teacher.config))
    return Reweighter.from_folder(folder), fitted, examples, folder


def test_the_runtime_serves_what_torch_fitted(small_fit):
    """Each query's term list at search time is, per term, the sum over its chunks of exp(max(y, 0))
    of torch's y for that chunk (the vectors ship in float16: within 1%)."""
    model, fitted, examples, _ = small_fit
    weights = iter(np.exp(np.maximum(fitted["predicted"], 0)).tolist())
    assert len(fitted["predicted"]) == len(examples.target)
    for text, served in zip(TEXTS * 4, model.encode_batch(TEXTS * 4)):
        expected: dict[str, float] = {}
        for word in text.split():
            terms = model.chunk(word)[0]
            weight = next(weights) if terms else None
            for term in terms:
                expected[term] = expected.get(term, 0.0) + weight
        assert served.keys() == expected.keys(), text
        np.testing.assert_allclose([served[t] for t in expected], list(expected.values()), rtol=1e-2)
    assert next(weights, None) is None  # every fitted example was served


def test_every_query_term_gets_a_weight_and_nothing_is_added(small_fit):
    from bm25aug.lucene.analysis import analyze

    model = small_fit[0]
    for text in [*TEXTS, "an unseen word: quixotrylliance, twice quixotrylliance"]:
        terms = model.encode(text)
        counts = {t: analyze(text).count(t) for t in set(analyze(text))}
        assert set(terms) == set(counts), text  # the analyzer's terms, no more
        for t, w in terms.items():
            assert np.isfinite(w) and w >= counts[t] - 1e-6, (text, t, w)  # at least BM25's own weight per occurrence
    assert model.encode("") == {} and model.encode("the of and") == {}
    assert model.encode_batch(TEXTS) == [model.encode(t) for t in TEXTS]


def test_it_searches_a_stock_index_on_every_path_alike(small_fit, tmp_path):
    from test_packaged import assert_every_path_alike
    from test_stock_index import pyserini_index

    assert_every_path_alike(str(small_fit[3]), pyserini_index(tmp_path / "stock.flat"))


def test_a_damaged_or_wrong_folder_is_one_line(small_fit, tmp_path):
    from bm25aug.model.loading import load_model
    from bm25aug.model.onnx_encoder import load_encoder

    copy = tmp_path / "model"
    shutil.copytree(small_fit[3], copy)
    (copy / WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="cannot be read.*fix:"):
        load_encoder(copy)
    from safetensors.numpy import load_file, save_file

    tables = load_file(str(small_fit[3] / WEIGHTS_FILE))
    tables["v"][0] = np.nan
    save_file(tables, str(copy / WEIGHTS_FILE))
    with pytest.raises(UserError, match="^NaN or infinite values in v of .*fix: fit it again"):
        load_encoder(copy)
    with pytest.raises(UserError, match="reweighter.*nothing in it trains"):
        load_model(small_fit[3])
    with pytest.raises(UserError, match="not a reweighter"):
        Reweighter.from_folder(packaged.PACKAGED_ROOT / "general")
