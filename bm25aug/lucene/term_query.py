"""A weighted term list built as a Lucene query structure, in Java, from arrays: never parsed from text.

``{term: weight}`` is searched as exactly one clause per term with a positive weight, in the
order given: ``BooleanQuery(SHOULD BoostQuery(TermQuery(contents:term), float32(weight)), ...)``.
On a multifield index, the same clauses once per field, each field's group boosted by its weight:
``BooleanQuery(SHOULD BoostQuery(<the clauses on field f>, weight_f), ...)``, the query Pyserini's
multifield search builds. A term is searched as the exact string given, whatever it holds (``:``,
``*``, ``AND``, 300 characters): nothing splits, escapes or analyzes it.

No Java source is compiled. The builder is one ``MethodHandle`` made of ``java.lang.invoke``
combinators (two counted loops over the arrays), and its input crosses from Python in one call:
pyjnius turns the Python list ``[terms, boosts]`` into ``Object[]{String[], float[]}`` (a list
of ``str`` where Java takes an ``Object`` becomes a ``String[]``, a list of ``float`` a
``float[]``, each weight rounded to float32 as numpy rounds it). That element is what the batch
pool's ``Function`` takes (``bm25aug.lucene.batch``), so one query and a batch build the same
structure. ``element`` makes it; ``clauses`` counts the clauses Lucene will hold, checked against
the clause limit before Java sees the query (``check_clauses``).
"""

from __future__ import annotations

import re

import numpy as np

from bm25aug.errors import UserError
from bm25aug.limits import MAX_CLAUSES
from bm25aug.lucene.jvm import JNI_LOCK, jclass, process_wide

_SPECIAL = re.compile(r'([\\+\-!():^\[\]"{}~*?|&/\s])')  # what Lucene's query syntax escapes (query_syntax)
_KEYWORDS = {"AND", "OR", "NOT"}


def element(terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None:
    """The Python form of the Java element the builder takes: ``[terms, boosts]`` (one field), or
    ``[terms, boosts, field names, field weights]``; None when no weight is above 0. Weights are
    Python floats, so that pyjnius makes a ``float[]`` (a numpy float32 would not be one)."""
    kept = [(t, float(w)) for t, w in terms.items() if w > 0]
    if not kept:
        return None
    check_clauses(len(kept), len(fields) if fields else 1)
    names, boosts = [t for t, _ in kept], [w for _, w in kept]
    if not fields:
        return [names, boosts]
    return [names, boosts, list(fields), [float(w) for w in fields.values()]]


def clauses(terms: int, fields: int = 1) -> int:
    """Clauses Lucene counts against its limit for ``terms`` terms on ``fields`` fields: each term
    once per field (IndexSearcher counts the clauses nested in each field's group,
    ``TooManyNestedClauses``; measured: 32,768 terms on two fields search, 32,769 do not)."""
    return terms * fields


def check_clauses(terms: int, fields: int = 1) -> None:
    """The query's own limit, as one line with the numbers and the fix (never a damaged index)."""
    if (n := clauses(terms, fields)) > MAX_CLAUSES:
        most = MAX_CLAUSES // fields
        on = "" if fields == 1 else f" on {fields} fields"
        raise UserError(f"the query has {terms:,} terms{on}, {n:,} clauses, over Lucene's clause limit of "
                        f"{MAX_CLAUSES:,}; fix: send at most the {most:,} heaviest terms")


class _Builders:
    """The builder handles, made once per process (``handle``)."""

    def __init__(self):
        cls = jclass("java.lang.Class")
        h, mt = jclass("java.lang.invoke.MethodHandles"), jclass("java.lang.invoke.MethodType")
        lookup = h.publicLookup()
        string, strings = cls.forName("java.lang.String"), cls.forName("[Ljava.lang.String;")
        jfloat, floats, jint = jclass("java.lang.Float").TYPE, cls.forName("[F"), jclass("java.lang.Integer").TYPE
        objects, query = cls.forName("[Ljava.lang.Object;"), cls.forName("org.apache.lucene.search.Query")
        builder, boolean = (cls.forName("org.apache.lucene.search.BooleanQuery$Builder"),
                            cls.forName("org.apache.lucene.search.BooleanQuery"))
        term, term_query, boost_query = (cls.forName("org.apache.lucene.index.Term"),
                                         cls.forName("org.apache.lucene.search.TermQuery"),
                                         cls.forName("org.apache.lucene.search.BoostQuery"))
        void = jclass("java.lang.Void").TYPE
        should = jclass("org.apache.lucene.search.BooleanClause$Occur").SHOULD
        occur = cls.forName("org.apache.lucene.search.BooleanClause$Occur")
        # (Builder, Query) -> Builder: builder.add(query, SHOULD)
        add = h.insertArguments(lookup.findVirtual(builder, "add", mt.methodType(builder, [query, occur])), 2, should)
        build = lookup.findVirtual(builder, "build", mt.methodType(boolean)).asType(mt.methodType(query, [builder]))
        new_builder = lookup.findConstructor(builder, mt.methodType(void))
        # (Query, float) -> Query: new BoostQuery(query, boost)
        boosted = lookup.findConstructor(boost_query, mt.methodType(void, [query, jfloat])).asType(
            mt.methodType(query, [query, jfloat]))
        # (String field, String text) -> Query: new TermQuery(new Term(field, text))
        term_of = h.filterReturnValue(lookup.findConstructor(term, mt.methodType(void, [string, string])),
                                      lookup.findConstructor(term_query, mt.methodType(void, [term]))).asType(
            mt.methodType(query, [string, string]))
        string_at, float_at = h.arrayElementGetter(strings), h.arrayElementGetter(floats)
        # (String field, String[] terms, int i, float[] boosts, int i) -> Query: terms[i] on field, boosted by boosts[i]
        clause = h.collectArguments(h.collectArguments(h.collectArguments(boosted, 0, term_of), 1, string_at), 3, float_at)
        # loop body (Builder, int i, String field, String[] terms, float[] boosts) -> Builder
        body = h.permuteArguments(h.collectArguments(add, 1, clause), mt.methodType(
            builder, [builder, jint, string, strings, floats]), 0, 2, 3, 1, 4, 1)
        leading = [string, strings, floats]
        count = h.dropArguments(h.dropArguments(h.arrayLength(strings), 0, string), 2, floats)
        # (String field, String[] terms, float[] boosts) -> Query: the clauses of one field
        on_field = h.filterReturnValue(h.countedLoop(count, h.dropArguments(new_builder, 0, *leading), body), build)
        # multifield: (String[] fields, float[] weights, String[] terms, float[] boosts) -> Query
        group = h.collectArguments(h.collectArguments(boosted, 0, h.collectArguments(on_field, 0, string_at)), 4, float_at)
        # group: (String[] fields, int j, String[] terms, float[] boosts, float[] weights, int j) -> Query
        outer_body = h.permuteArguments(h.collectArguments(add, 1, group), mt.methodType(
            builder, [builder, jint, strings, floats, strings, floats]), 0, 2, 1, 4, 5, 3, 1)
        outer_leading = [strings, floats, strings, floats]
        outer_count = h.dropArguments(h.arrayLength(strings), 1, floats, strings, floats)
        on_fields = h.filterReturnValue(h.countedLoop(outer_count, h.dropArguments(new_builder, 0, *outer_leading),
                                                      outer_body), build)
        # the element Object[] taken apart: slot i cast to its array class
        def slot(i, kind):
            return h.insertArguments(h.arrayElementGetter(objects), 1, jclass("java.lang.Integer")(i)).asType(
                mt.methodType(kind, [objects]))

        as_objects = h.explicitCastArguments(h.identity(objects), mt.methodType(objects, [cls.forName("java.lang.Object")]))
        # (String field, Object element) -> Query, and (Object element) -> Query
        single = h.filterArguments(on_field, 1, slot(0, strings), slot(1, floats))
        self._single = h.filterArguments(h.permuteArguments(single, mt.methodType(query, [string, objects]), 0, 1, 1),
                                         1, as_objects)
        multi = h.filterArguments(on_fields, 0, slot(2, strings), slot(3, floats), slot(0, strings), slot(1, floats))
        self._multi = h.filterArguments(h.permuteArguments(multi, mt.methodType(query, [objects]), 0, 0, 0, 0), 0,
                                        as_objects)
        self.h = h
        self._function = cls.forName("java.util.function.Function")
        self._proxies = jclass("java.lang.invoke.MethodHandleProxies")
        self._handles: dict[str | None, tuple] = {}

    def handle(self, field: str | None):
        """``(handle, Function proxy)`` of the builder for one ``field``, or for several (None)."""
        if (made := self._handles.get(field)) is None:
            handle = self._multi if field is None else self.h.insertArguments(self._single, 0, field)
            made = self._handles[field] = (handle, self._proxies.asInterfaceInstance(self._function, handle))
        return made


builders = process_wide(_Builders)  # () -> _Builders


def handle(field: str | None):
    """The builder ``(Object element) -> Query`` as a ``MethodHandle``: on ``field`` for an element
    of one field, or on the element's own fields (None)."""
    with JNI_LOCK:
        return builders().handle(field)[0]


def build(item: list, field: str):
    """The Java ``Query`` of an ``element`` (not None): on ``field``, unless it names its fields."""
    with JNI_LOCK:  # the proxies share one class, so one pyjnius method: keep its target ours
        return builders().handle(None if len(item) == 4 else field)[1].apply(item)


def query_syntax(terms: dict[str, float], fields: dict[str, float] | None = None) -> str:
    """The structure a weighted term list is searched as (``bm25aug.lucene.term_query``), written in
    Lucene's query syntax for people to read (the REST answer's ``query.text``): ``term^boost``
    clauses, terms escaped, each field's group boosted by its weight. Nothing parses it back."""
    clauses = [f"{escape_term(t)}^{_boost(w)}" for t, w in terms.items() if w > 0]
    if not fields or not clauses:
        return " ".join(clauses)
    return " ".join(f"({' '.join(f'{field}:{c}' for c in clauses)})^{_boost(weight)}" for field, weight in fields.items())


def escape_term(term: str) -> str:
    """A term as Lucene's classic query syntax writes it (no operators, no wildcards)."""
    escaped = _SPECIAL.sub(r"\\\1", term)
    return "\\" + escaped if escaped in _KEYWORDS else escaped


def _boost(weight: float) -> str:
    """The shortest decimal of the float32 boost Lucene holds (whole numbers as they are)."""
    if weight == int(weight) and weight < 2**24:
        return str(int(weight))
    return np.format_float_positional(np.float32(weight), unique=True, trim="0")
