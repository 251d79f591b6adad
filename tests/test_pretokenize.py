"""The fast document tokenizer of wp index builds equals Hugging Face's, token for token."""

import pytest

from bm25aug.lucene.pretokenize import DocumentTokenizer, tokenized_batches
from bm25aug.tokenization import load_tokenizer, untruncated

ADVERSARIAL = ["Tab\there\r\nnew\x00line\x07bell\x0bvt\x0cff\x1fus\x7fdel", "ÀÉÎõü naïve café", "ΣΟΦΟΣ σοφός",
               "İstanbul", "中文字符 mixed 漢字", "a\u2028b\u00a0c\u200bd\u3000e\u0085f", "x" * 150 + " " + "y" * 99,
               "don't stop—now!!", "émigré's 'quoted' «text» ¿qué?", "\ufeffbom", "e\u0301 combining",
               "emoji 🙂 here", "", "   ", "$100.50 & 20% (approx.) [ref] {x} ~y~ `z` @home #tag", "\ufffdreplacement",
               "ﬁ ligature", "Ⅻ roman", "ǅ titlecase"]


def reference(backend, texts):
    return [" ".join(e.tokens) for e in backend.encode_batch(texts, add_special_tokens=False)]


@pytest.fixture(scope="module")
def backend():
    return untruncated(load_tokenizer())


def test_fast_path_is_used_and_exact_on_adversarial_text(backend):
    tokenize = DocumentTokenizer(backend)
    assert tokenize.fast
    assert tokenize(ADVERSARIAL) == reference(backend, ADVERSARIAL)


@pytest.mark.parametrize("name", ["scifact", "nfcorpus", "squad"])
def test_exact_on_every_shared_document(name, data_dir, backend):
    from bm25aug.data.registry import load_dataset

    texts = [doc.contents for _, doc in load_dataset(name, data_dir).corpus.items()]
    assert DocumentTokenizer(backend)(texts) == reference(backend, texts)


def test_worker_processes_keep_order(backend):
    batches = [ADVERSARIAL[i:i + 3] for i in range(0, len(ADVERSARIAL), 3)] * 3
    got = list(tokenized_batches(backend, iter(batches), processes=2))
    assert got == [reference(backend, b) for b in batches]


def test_other_pipelines_fall_back_to_hugging_face():
    from tokenizers import Tokenizer, models, pre_tokenizers

    other = Tokenizer(models.WordLevel({"hello": 0, "[UNK]": 1}, unk_token="[UNK]"))
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenize = DocumentTokenizer(other)
    assert not tokenize.fast and tokenize(["hello world"]) == ["hello [UNK]"]
