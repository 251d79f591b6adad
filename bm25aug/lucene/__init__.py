"""Lucene through Pyserini's Anserini jar: the JVM, index building, a fast reader and the analyzer."""
