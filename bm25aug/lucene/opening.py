"""What opening and searching a Lucene index needs from Java: the process-wide objects (resolved
once), the search handle that packs a query's hits into one byte array, the index's reader, and
Lucene's failures as one error line. ``bm25aug.lucene.reader`` (one query) and
``bm25aug.lucene.batch`` (many, on a Java thread pool) both search through these."""

from __future__ import annotations

from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.limits import MAX_CLAUSES
from bm25aug.lucene.jvm import JNI_LOCK, anserini_jar, jclass, process_wide


class _Java:
    """Process-wide Java objects, resolved once (see the module docstring for why singletons)."""

    def __init__(self):
        with JNI_LOCK:
            cls = jclass("java.lang.Class")
            self.Integer = jclass("java.lang.Integer")
            self.bag_of_words = jclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
            self.english = jclass("io.anserini.index.IndexCollection").DEFAULT_ANALYZER
            self.search = _search_handle(cls, self.Integer.TYPE)
            # Whether each unlocked call has run once under the lock (which resolves its classes).
            self.search_warm, self.analyzed_warm = False, {}  # analyzed: {one field?: warm}
            self.BM25 = jclass("org.apache.lucene.search.similarities.BM25Similarity")
        self._integers: dict[int, object] = {}

    def integer(self, n: int):
        """A ``java.lang.Integer``, made once per value (search asks for the same few depths)."""
        boxed = self._integers.get(n)
        if boxed is None:
            with JNI_LOCK:
                boxed = self._integers.setdefault(n, self.Integer(n))
        return boxed


def _search_handle(cls, int_type):
    """One ``MethodHandle`` for ``searcher.search(query, n).scoreDocs`` packed into a ``byte[]``
    of big-endian (int doc, float score) pairs, built from ``java.lang.invoke`` combinators alone
    (no Java source to compile): pyjnius then hands over one byte array instead of wrapping a
    Java object per hit."""
    h, mt = jclass("java.lang.invoke.MethodHandles"), jclass("java.lang.invoke.MethodType")
    lookup = h.publicLookup()
    jint, jfloat = int_type, jclass("java.lang.Float").TYPE
    score_doc, score_docs = cls.forName("org.apache.lucene.search.ScoreDoc"), cls.forName("[Lorg.apache.lucene.search.ScoreDoc;")
    top_docs, math, buffer = cls.forName("org.apache.lucene.search.TopDocs"), cls.forName("java.lang.Math"), cls.forName("java.nio.ByteBuffer")
    integer = jclass("java.lang.Integer")
    # pyjnius passes a Java varargs parameter as separate Python arguments.
    times_eight = h.insertArguments(lookup.findStatic(math, "multiplyExact", mt.methodType(jint, [jint, jint])), 1, integer(8))
    plus_four = h.insertArguments(lookup.findStatic(math, "addExact", mt.methodType(jint, [jint, jint])), 1, integer(4))
    length = h.arrayLength(score_docs)
    allocate = h.filterReturnValue(h.filterReturnValue(length, times_eight),
                                   lookup.findStatic(buffer, "allocate", mt.methodType(buffer, [jint])))
    element = h.arrayElementGetter(score_docs)
    doc = h.filterReturnValue(element, lookup.findGetter(score_doc, "doc", jint))
    score = h.filterReturnValue(element, lookup.findGetter(score_doc, "score", jfloat))
    put_int = lookup.findVirtual(buffer, "putInt", mt.methodType(buffer, [jint, jint]))
    put_float = lookup.findVirtual(buffer, "putFloat", mt.methodType(buffer, [jint, jfloat]))
    step = mt.methodType(buffer, [buffer, jint, score_docs])  # (bytes, i, scoreDocs) -> bytes
    put_doc = h.permuteArguments(h.collectArguments(h.filterArguments(put_int, 1, times_eight), 2, doc), step, 0, 1, 2, 1)
    put_score = h.permuteArguments(h.collectArguments(
        h.filterArguments(put_float, 1, h.filterReturnValue(times_eight, plus_four)), 2, score), step, 0, 1, 2, 1)
    body = h.foldArguments(h.dropArguments(put_score, 1, buffer), put_doc)  # put_score(put_doc(b, i, a), i, a)
    pack = h.filterReturnValue(h.countedLoop(length, allocate, body),
                               lookup.findVirtual(buffer, "array", mt.methodType(cls.forName("[B"))))
    search = lookup.findVirtual(cls.forName("org.apache.lucene.search.IndexSearcher"), "search", mt.methodType(
        top_docs, [cls.forName("org.apache.lucene.search.Query"), jint]))
    return h.filterReturnValue(h.filterReturnValue(search, lookup.findGetter(top_docs, "scoreDocs", score_docs)), pack)


java = process_wide(_Java)  # () -> _Java


def open_reader(index_dir: str | Path):
    """A Lucene ``DirectoryReader`` over the index folder (close it when done). Lucene checks each
    file's footer as it opens it, so a truncated or damaged index is one error line here."""
    java()  # starts the JVM with Anserini's classpath, which importing jnius first would not
    from jnius import JavaException

    try:
        with JNI_LOCK:
            directory = jclass("org.apache.lucene.store.FSDirectory").open(jclass("java.nio.file.Paths").get(str(index_dir)))
            return jclass("org.apache.lucene.index.DirectoryReader").open(directory)
    except JavaException as e:
        raise damaged(index_dir, e) from None


# Java failing to load or link its own code: the jar on the classpath is incomplete or from another
# release, whatever index is open, so rebuilding the index would not help.
_LINKAGE_ERRORS = ("NoClassDefFoundError", "ClassNotFoundException", "NoSuchMethodError", "NoSuchFieldError",
                   "IncompatibleClassChangeError", "UnsatisfiedLinkError")


def damaged(index_dir: str | Path, error: Exception) -> UserError:
    """The error for an index that Lucene cannot read (a truncated or overwritten file), unless
    Java failed to load or link its own classes, which no rebuild of the index would mend."""
    cause = (str(error).splitlines() or [type(error).__name__])[0][:160]
    # pyjnius keeps a Java error's class apart from its message (``classname``), and a wrapped
    # error names its cause only in the stack trace, so look at all of it.
    classname = getattr(error, "classname", None) or ""
    everything = " ".join([classname, str(error), *map(str, getattr(error, "stacktrace", None) or [])])
    if any(name in everything for name in _LINKAGE_ERRORS):
        if classname:
            cause = f"{classname}: {getattr(error, 'innermessage', None) or cause}"[:160]
        return UserError(f"Java cannot load or link Lucene's classes ({cause}); {index_dir} is not at fault, the "
                         f"Anserini jar {anserini_jar()} is incomplete or from another release; fix: pip install "
                         f"--force-reinstall --no-deps pyserini==1.6.0")
    return UserError(f"{index_dir} is damaged: Lucene cannot read it ({cause}); fix: rebuild it with "
                     f"`bm25aug index --dataset NAME --force`, or restore the original index")


def search_error(index_dir: str | Path, error: Exception) -> UserError:
    """A search Lucene refused: too many query clauses (a query's own limit, checked before the search
    by ``term_query.check_clauses``; nested ones count too), else a damaged index."""
    everything = " ".join([getattr(error, "classname", None) or "", type(error).__name__, str(error)])
    if "TooManyClauses" in everything or "TooManyNestedClauses" in everything:
        return UserError(f"the query has more distinct terms than Lucene's clause limit ({MAX_CLAUSES:,}); fix: shorten it")
    return damaged(index_dir, error)
