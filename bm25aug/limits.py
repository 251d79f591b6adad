"""Every numeric setting's range, and the limits on a query, checked in one place.

The command line checks its parsed options here (``check_all``) before any work, and the library
checks the same names where they enter it (``EvalConfig``, ``TrainConfig``, ``LuceneIndex``,
``prune``, qrels files), so a value the JVM, pytrec_eval or the trainer would reject, misread or
wrap around is one line naming the range instead: ``--k -5`` used to score every query 0, a
relevance grade of 2^32 wrapped to 0, ``--b 5`` was a Java traceback.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from bm25aug.errors import UserError

JAVA_INT_MAX = 2**31 - 1
MAX_CLAUSES = 1 << 16  # Lucene's clause limit as the JVM is set up (bm25aug.lucene.jvm); its default is 1,024
# The largest weight a term of a weighted query may have: far above any model's (SPLADE's run to a
# few hundred), far below what overflows Lucene's 32-bit score (weight x BM25's term score, summed
# over up to MAX_CLAUSES terms; a boost near 3.4e38 made scores infinite and hits unreadable).
MAX_TERM_WEIGHT = 1e6
# The smallest positive weight: a weight is searched as a float32 boost, and below float32's smallest
# normal number (2^-126, 1.2e-38) it holds fewer digits, then none (under about 7e-46 it is 0, and the
# term would be searched with no weight at all). 0 itself drops the term. The rule is applied in one
# place, bm25aug.search.term_lists.weight_unfit, for the library, REST, MCP and the CLI alike.
MIN_TERM_WEIGHT = 2.0 ** -126
# Analyzed, a query of at most this many characters has at most as many distinct terms; with
# the most terms a model adds (a few thousand), that stays below the clause limit the JVM is set
# to (MAX_CLAUSES), past which Lucene raises TooManyClauses.
MAX_QUERY_CHARS = 50_000
# The query encoder's runtimes (bm25aug.model.onnx_encoder), here so that options can be checked without torch.
RUNTIMES = ("onnx-int8", "torch-int8", "torch-fp32")


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``high_open``: ``< high``); None: unbounded on that side."""

    low: float | None
    high: float | None = None
    integer: bool = False
    high_open: bool = False
    note: str = ""  # what the ends mean, for the error's fix

    def allows(self, value) -> bool:
        kind = numbers.Integral if self.integer else numbers.Real  # 10.0 as a hit count reached Java as a float
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and value < self.low:
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.high is None:
            text = f"{kind} >= {_number(self.low)}"
        else:
            text = f"{kind} from {_number(self.low)} to {'below ' if self.high_open else ''}{_number(self.high)}"
        return f"{text} ({self.note})" if self.note else text


def _number(value: float) -> str:
    """A range's end as people write it: 2,147,483,647 rather than 2.14748e+09."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) >= 10_000 else f"{value:g}"


RANGES: dict[str, Range] = {
    # search and evaluation
    "k": Range(1, JAVA_INT_MAX, integer=True, note="hits per query"),
    "k1": Range(0, 1000, note="BM25 term-frequency saturation; Pyserini's BEIR runs use 0.9"),
    "b": Range(0, 1, note="BM25 length normalization; Pyserini's BEIR runs use 0.4"),
    "threads": Range(1, 1024, integer=True),
    "aug_gate": Range(0, None, integer=True, note="0: no gate"),
    "added_budget": Range(0, None, integer=True, note="0: every added term"),
    "top_k": Range(1, None, integer=True, note="leave it out to keep every term"),
    "threshold": Range(0, None),
    "encode_batch_size": Range(1, 4096, integer=True, note="queries a forward pass of the query encoder"),
    "fb_terms": Range(1, 1000, integer=True, note="RM3 feedback terms"),
    "fb_docs": Range(1, 1000, integer=True, note="RM3 feedback documents"),
    "original_weight": Range(0, 1, note="RM3's weight on the original query"),
    "fusion_weight": Range(0, 1, note="hybrid interpolation's share of the sparse side; the dense side gets the rest"),
    "fusion_depth": Range(1, JAVA_INT_MAX, integer=True, note="hits each side of a hybrid contributes"),
    "rrf_k": Range(0, 1_000_000, integer=True, note="reciprocal rank fusion's constant, e.g. 60"),
    # qrels: trec_eval sizes its tables by the largest grade (2^31 took 16.8 GB) and stores grades in 32 bits
    "grade": Range(-1000, 1000, integer=True, note="graded qrels use small integers such as 0, 1, 2"),
    # training
    "epochs": Range(1, None, integer=True),
    "epoch_steps": Range(0, None, integer=True, note="0: every example once an epoch"),
    "expansion_terms": Range(0, 1000, integer=True, note="candidate added terms per query term; 0: reweighting only"),
    "batch_size": Range(1, None, integer=True),
    "lr": Range(0, 1, note="the encoder's learning rate, e.g. 3e-5"),
    "head_lr": Range(0, 1, note="the heads' learning rate, e.g. 1e-3"),
    "table_lr": Range(0, 10, note="the static table's learning rate, e.g. 0.05"),
    "weight_decay": Range(0, 1),
    "warmup_ratio": Range(0, 1),
    "lam": Range(0, None),
    "penalty_floor": Range(0, None),
    "off_positive_penalty": Range(0, None),
    "ema_decay": Range(0, 1, high_open=True, note="0: off; e.g. 0.99"),
    "flops": Range(0, None, note="0: off"),
    "significance": Range(0, 1, high_open=True, note="0: off; e.g. 0.05"),
    "gate_quantile": Range(0, 1, note="0: no gate"),
    "corpus_temperature": Range(0.01, 1000, note="1: corpora in proportion to their size; higher: towards uniform"),
    "hard_negatives": Range(0, None, integer=True),
    "random_negatives": Range(0, None, integer=True),
    "pseudo_queries": Range(0, None, integer=True),
    "negative_depth": Range(1, None, integer=True),
    "max_query_length": Range(1, 512, integer=True, note="tokens the encoder reads"),
    "dev_size": Range(1, None, integer=True),
    "dev_depth": Range(1, None, integer=True),
    "seed": Range(0, 2**32 - 1, integer=True),
    "weight_floor": Range(0, None),
    "aug_threshold": Range(0, None),
    "encoder_layers": Range(0, None, integer=True),
    "aug_layer": Range(-1, None, integer=True, note="-1: the last layer"),
    "distill_weight": Range(0, None),
    "feedback_terms": Range(0, 100, integer=True, note="0: the query alone"),
}


def check(name: str, value, option: str | None = None):
    """``value`` if it is in ``name``'s range (None, meaning "the default", passes), else a
    ``UserError`` naming the option, the value and the range."""
    if value is None:
        return value
    rule = RANGES[name]
    if not rule.allows(value):
        option = option or f"--{name.replace('_', '-')}"
        raise UserError(f"{option} {value!r} is out of range; fix: pass {rule.describe()}")
    return value


def run_id_ok(value: str) -> bool:
    """Whether an id can stand in a TREC run or qrels line, which split on whitespace and are
    written as UTF-8, and in the fixed-width id tables, which drop trailing NULs: no whitespace,
    no control character, no lone surrogate (JSON's ``"\\ud800"``, which UTF-8 cannot hold)."""
    if not (bool(value) and len(value.split()) == 1 and value.strip() == value
            and not any(ord(c) < 32 or ord(c) == 127 for c in value)):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# What a run_id_ok failure says, and its fix: "query id 'x' " + ID_RULE.
ID_RULE = ("is empty, holds whitespace or a control character, or is not valid Unicode (a lone surrogate), none of "
           "which a TREC run or qrels line can hold; fix: give it an id of printable characters without spaces")


def check_choice(what: str, value, choices: tuple) -> str:
    """``value`` if it is one of ``choices``, else a ``UserError`` listing them."""
    if value not in choices:
        raise UserError(f"unknown {what} {value!r}; fix: use one of {', '.join(map(str, choices))}")
    return value


def check_all(settings) -> None:
    """Check every attribute of ``settings`` (parsed options, a config dataclass) that has a range."""
    for name in RANGES:
        if hasattr(settings, name):
            check(name, getattr(settings, name))


def check_text(text: str, what: str) -> str:
    """``text`` unless Java and the tokenizers cannot take it: a lone UTF-16 surrogate (JSON's
    ``"\\ud800"`` decodes to one) is not valid Unicode, and pyjnius fails on it."""
    if not isinstance(text, str):
        raise UserError(f"{what} is a {type(text).__name__}, not text; fix: make it a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{what} holds a lone surrogate ({text[e.start]!r} at character {e.start}), which is not "
                        f"valid Unicode; fix: remove it or replace it with the character it stood for") from None
    return text


def check_query(query) -> str:
    """A query string Lucene can search: valid Unicode and at most ``MAX_QUERY_CHARS`` characters."""
    if not isinstance(query, str):
        raise TypeError(f"a query must be a str, not {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise UserError(f"a query of {len(query):,} characters is over the {MAX_QUERY_CHARS:,} limit; "
                        f"fix: shorten it (BM25 caps a query's distinct terms)")
    return check_text(query, "the query")
