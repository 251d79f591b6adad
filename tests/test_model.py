import pytest
import torch

from bm25aug.errors import UserError
from bm25aug.model.augmenter import AugmenterConfig, QueryAugmenter


def test_boosts_reduce_to_bm25_counts_without_a_and_w(offline_model):
    m = QueryAugmenter(AugmenterConfig(encoder=offline_model.config.encoder, use_weights=False, use_augmentation=False,
                                       target="wp"),
                       offline_model.encoder, offline_model.tokenizer)
    assert m.encode("cat cat dog \u2603") == {"cat": 2.0, "dog": 1.0}  # [UNK] and [CLS]/[SEP] dropped


@torch.no_grad()
def test_boost_rule_query_terms_and_added_terms(offline_model):
    enc = offline_model.tokenize(["cat cat dog"])
    out = offline_model.eval()(enc["input_ids"], enc["attention_mask"])
    terms = offline_model.encode("cat cat dog")
    tok = offline_model.tokenizer
    cat, dog = tok.convert_tokens_to_ids(["cat", "dog"])
    a = out.augmentation[0]
    hidden = offline_model.encoder(**enc).last_hidden_state[0]
    w = torch.relu(offline_model.weight_head(hidden).squeeze(-1))
    ids = enc["input_ids"][0].tolist()
    w_cat = sum(w[i] for i, t in enumerate(ids) if t == cat)
    assert terms["cat"] == pytest.approx(float(w_cat * (1 + a[cat])), rel=1e-5)  # summed w times (1 + a)
    added = {t: v for t, v in terms.items() if t not in ("cat", "dog")}
    expected = {tok.convert_ids_to_tokens(int(i)): float(a[i]) for i in torch.nonzero(a > 0).ravel()}
    expected = {t: v for t, v in expected.items() if t not in ("cat", "dog")}
    assert added == pytest.approx(expected, rel=1e-6)  # non-query entries: boost = a
    assert float(a[tok.all_special_ids].abs().sum()) == 0.0


def test_save_and_load_round_trip(offline_model, tmp_path):
    offline_model.save_pretrained(tmp_path / "ckpt")
    loaded = QueryAugmenter.from_pretrained(tmp_path / "ckpt")
    assert loaded.config == offline_model.config
    q = ["does vitamin d affect birth weight"]
    a, b = offline_model.eval().encode_batch(q)[0], loaded.encode_batch(q)[0]
    assert a.keys() == b.keys() and all(a[t] == pytest.approx(b[t], rel=1e-5) for t in a)
    assert not list(tmp_path.glob(".ckpt*"))


def test_missing_and_corrupt_checkpoints(offline_model, tmp_path):
    with pytest.raises(UserError, match="not a bm25aug checkpoint"):
        QueryAugmenter.from_pretrained(tmp_path / "nothing")
    offline_model.save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(UserError, match="corrupt or incomplete"):
        QueryAugmenter.from_pretrained(tmp_path / "ckpt")


def test_quantized_model_keeps_the_query_terms(offline_model):
    q = ["breast cancer prognosis"]
    full, small = offline_model.eval().encode_batch(q)[0], offline_model.quantized().encode_batch(q)[0]
    for t in ("breast", "cancer"):
        assert t in full and t in small


@torch.no_grad()
def test_augmentation_gate_keeps_reweighting_only(offline_model):
    """A query for which a(q) has more non-zero entries than ``aug_gate`` gets no added terms;
    its own terms keep w. ``calibrate_gate`` is the quantile of those counts over queries."""
    from dataclasses import replace

    from bm25aug.train.callbacks import calibrate_gate

    q = "does vitamin d affect birth weight"
    enc = offline_model.tokenize([q])
    a = offline_model.eval()(enc["input_ids"], enc["attention_mask"]).augmentation
    n = int((offline_model.target.live_part(a) > 0).sum())
    assert n > 1
    gated = QueryAugmenter(replace(offline_model.config, aug_gate=n - 1), offline_model.encoder,
                           offline_model.tokenizer).eval()
    gated.load_state_dict(offline_model.state_dict())
    plain = QueryAugmenter(replace(offline_model.config, use_augmentation=False), offline_model.encoder,
                           offline_model.tokenizer).eval()
    plain.load_state_dict(offline_model.state_dict())
    assert gated.encode(q) == pytest.approx(plain.encode(q))  # reweighting only
    gated.config.aug_gate = n
    assert gated.encode(q) == pytest.approx(offline_model.encode(q))
    assert calibrate_gate(offline_model, [q] * 3, 0.99) == n


@torch.no_grad()
def test_aug_threshold_zeroes_small_entries_and_keeps_the_rest(offline_model):
    """With ``aug_threshold`` τ, a(q) has no entry in (0, τ]; entries above τ are as without it."""
    from dataclasses import replace

    enc = offline_model.tokenize(["does vitamin d affect birth weight"])
    plain = offline_model.eval()(enc["input_ids"], enc["attention_mask"]).augmentation
    tau = float(plain[plain > 0].median())
    pruned_model = QueryAugmenter(replace(offline_model.config, aug_threshold=tau), offline_model.encoder,
                                  offline_model.tokenizer).eval()
    pruned_model.load_state_dict(offline_model.state_dict())
    pruned = pruned_model(enc["input_ids"], enc["attention_mask"]).augmentation
    assert not bool(((pruned > 0) & (pruned <= tau)).any())
    assert torch.equal(pruned, plain * (plain > tau))
    assert 0 < int((pruned > 0).sum()) < int((plain > 0).sum())


def test_encoder_layers_keeps_the_first_layers_through_save_and_load(offline_model, tmp_path):
    small = QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=2)
    assert len(small.encoder.encoder.layer) == 2
    for got, ref in zip(small.encoder.encoder.layer, offline_model.encoder.encoder.layer):
        assert all(torch.equal(p, q) for p, q in zip(got.parameters(), ref.parameters()))
    small.save_pretrained(tmp_path / "small")
    loaded = QueryAugmenter.from_pretrained(tmp_path / "small")
    assert len(loaded.encoder.encoder.layer) == 2
    q = ["does vitamin d affect birth weight"]
    assert loaded.encode_batch(q)[0] == pytest.approx(small.eval().encode_batch(q)[0], rel=1e-5)
    with pytest.raises(UserError, match="fix: pass a number from 0 to 6"):
        QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=7)


def test_no_encoder_layers_reads_the_query_through_its_embeddings_alone(offline_model):
    """``layers=0``: the encoder is its embedding layer (word + position embeddings, LayerNorm),
    so a token's state is the same in any context but its position, and the heads still run."""
    bare = QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=0).eval()
    assert len(bare.encoder.encoder.layer) == 0
    enc = bare.tokenize(["vitamin d birth weight", "vitamin c birth weight"])
    hidden = bare.encoder(**enc).last_hidden_state
    embedded = offline_model.encoder.embeddings(input_ids=enc["input_ids"])
    assert torch.allclose(hidden, embedded, atol=1e-6)
    assert torch.equal(hidden[0, 3:], hidden[1, 3:])  # "birth weight [SEP]": same tokens, same places
    assert bare.encode("vitamin d birth weight")


@pytest.mark.parametrize("which", ["offline_model", "flat_model"])
def test_query_window_equals_the_hf_tokenizer_call(which, request):
    """Search tokenizes queries with a private, pre-configured Rust tokenizer; ids, mask and
    offsets equal ``tokenizer(..., padding=True, truncation=True, max_length=64)``."""
    import numpy as np

    model = request.getfixturevalue(which)
    queries = ["cat cat dog \u2603", "ALDH1 expression is associated with poorer prognosis in breast cancer",
               " ".join(["word"] * 90) + " tail", "emoji \U0001F600 then café", "", "a"]
    for batch in (queries, queries[:1], queries[2:3]):
        ours = model.target.batch(batch)
        theirs = model.tokenizer(batch, padding=True, truncation=True, max_length=model.config.max_query_length,
                                 return_tensors="np", return_offsets_mapping=True)
        assert np.array_equal(ours.input_ids, theirs["input_ids"])
        assert np.array_equal(ours.attention_mask, theirs["attention_mask"])
        for i, query in enumerate(batch):  # the same offsets give the same occurrences
            expected = model.target.occurrences(query, theirs["offset_mapping"][i],
                                                (theirs["attention_mask"][i] > 0) & ~model.target.special[theirs["input_ids"][i]])
            assert (ours.terms[i], ours.spans[i]) == expected


def test_aug_layer_pools_a_from_that_layer_and_w_from_the_last(tmp_path):
    """``aug_layer=0``: a(q) reads the embeddings, so changing a transformer layer moves w but not
    a; saved and loaded, the model keeps the setting; a layer the encoder lacks is a one-line error."""
    model = QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=2, aug_layer=0, aug_init_bias=-0.2).eval()
    enc = model.tokenize(["does vitamin d affect birth weight"])
    with torch.no_grad():
        before = model(enc["input_ids"], enc["attention_mask"])
        model.weight_head.weight.normal_(std=0.1)
        mid = model(enc["input_ids"], enc["attention_mask"])
        model.encoder.encoder.layer[1].output.dense.weight.mul_(2.0)
        after = model(enc["input_ids"], enc["attention_mask"])
    assert int((before.augmentation > 0).sum()) > 0
    assert torch.equal(after.augmentation, before.augmentation)
    assert not torch.allclose(after.token_weights, mid.token_weights)
    model.save_pretrained(tmp_path / "m")
    assert QueryAugmenter.from_pretrained(tmp_path / "m").config.aug_layer == 0
    with pytest.raises(UserError, match="fix: pass 0 \\(the embeddings\\) to 2, or -1"):
        QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, layers=2, aug_layer=3)


def test_centered_init_puts_the_mean_query_at_the_bias():
    """``center_aug_head``: at the mean query vector of the queries it was given, every a(q) logit
    is the initial bias, so a word starts proposed for a query nearer to it than the average
    query, not for being near every query. A max-pooled head has no query vector to center."""
    queries = ["vitamin d and birth weight", "statins lower cholesterol", "ALDH1 in breast cancer"]
    model = QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, aug_init="centered").eval()
    model.center_aug_head(queries)
    enc = model.tokenize(queries)
    with torch.no_grad():
        mean = model._pooled(model._states(enc["input_ids"], enc["attention_mask"])[1], enc["attention_mask"]).mean(0)
        logits = model.aug_head(mean)
    assert torch.allclose(logits, torch.full_like(logits, model.config.aug_init_bias), atol=1e-4)
    with pytest.raises(UserError, match="fix: use --pooling mean or cls"):
        QueryAugmenter.from_encoder(target="wp", weight_floor=0.0, aug_init="centered", pooling="max").center_aug_head(queries)
