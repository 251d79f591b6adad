"""Outputs checked before any work: no output may be an input, a file an input folder holds
(reached through symbolic or hard links too), or lie inside an input folder (a dataset, an index,
a model), and no two outputs may be one file (``check_outputs``); an output file must be writable
where ``bm25aug.io.atomic_open`` will write it (``check_output_path``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from bm25aug.errors import UserError

log = logging.getLogger(__name__)


def check_output_path(path: str | Path, option: str) -> Path:
    """Fail before the work starts if ``path`` cannot be written as a file (checked where
    ``atomic_open`` will write: a link's target; a device or FIFO needs only to be writable)."""
    given, path = Path(path), Path(os.path.realpath(path))
    if path.exists() and not path.is_file() and not path.is_dir():
        if not os.access(path, os.W_OK):
            raise UserError(f"{option} {given}: cannot write to it; fix: pass a path you can write")
        return given
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder; fix: pass a file path, e.g. {path / 'out'}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {given}: cannot write in {parent}; fix: pass a path in a writable folder")
    return given


def _same_or_inside(path: Path, other: Path) -> bool:
    """Whether ``path`` is ``other`` (the same file, through links too) or lies inside it."""
    a, b = path.resolve(), other.resolve()
    if a == b or b in a.parents:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


WALK_LIMIT = 20_000  # entries looked at in one input folder (datasets, indexes and models hold far fewer)


class _Reach:
    """Everything reading an input can touch: its real folder (and the real folders its links lead
    to) and every file in them, by real path and by (device, inode), so that a hard link counts too."""

    def __init__(self, source: Path):
        self.folders: list[Path] = []
        self.files: dict[tuple[int, int], Path] = {}
        seen: set[tuple[int, int]] = set()
        todo, looked = [source], 0
        while todo and looked < WALK_LIMIT:
            entry = todo.pop()
            looked += 1
            try:
                st = entry.stat()  # through links
            except OSError:
                continue  # a dangling link, or a file that vanished: nothing to protect
            real = Path(os.path.realpath(entry))
            if os.path.isdir(real):
                if (st.st_dev, st.st_ino) in seen:
                    continue  # a link loop, or a folder reached twice
                seen.add((st.st_dev, st.st_ino))
                self.folders.append(real)
                try:
                    todo.extend(real.iterdir())
                except OSError:
                    continue
            else:
                self.files[(st.st_dev, st.st_ino)] = entry
        if todo:
            log.warning("%s holds over %d files and folders; only those were checked against the outputs", source,
                        WALK_LIMIT)

    def clash(self, path: Path) -> str | None:
        """How an output at ``path`` would overwrite what this input reads: ``is <file>``, ``lies
        inside <folder>``, or None."""
        real = Path(os.path.realpath(path))
        for folder in self.folders:
            if real == folder or folder in real.parents:
                return f"lies inside {folder}"
        try:
            st = real.stat()
        except OSError:
            return None
        if (hit := self.files.get((st.st_dev, st.st_ino))) is not None:
            return f"is {hit}" if Path(os.path.realpath(hit)) == real else f"is a hard link of {hit}"
        return None

    def inside(self, folder: Path) -> Path | None:
        """A file or folder this input reads that lies inside ``folder`` (an output folder), if any."""
        real = Path(os.path.realpath(folder))
        for path in [*self.folders, *(Path(os.path.realpath(f)) for f in self.files.values())]:
            if path == real or real in path.parents:
                return path
        return None


def check_outputs(outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None],
                  folders: tuple[str, ...] = ()) -> None:
    """Before any work: no output may be an input, a file an input folder holds (reached through
    symbolic or hard links too), or lie inside an input folder (a dataset, an index, a model), and
    no two outputs may be one file. ``outputs``: option -> path (None: not asked for); ``inputs``:
    what it is -> path; ``folders``: the options whose output is a folder (the others must be
    writable files)."""
    given = {option: Path(p) for option, p in outputs.items() if p}
    reach = {what: _Reach(Path(source)) for what, source in inputs.items() if source} if given else {}
    for option, path in given.items():
        if option not in folders:
            check_output_path(path, option)
        for what, source in inputs.items():
            if not source:
                continue
            if _same_or_inside(path, Path(source)):
                where = "is" if path.resolve() == Path(source).resolve() else "lies inside"
                raise UserError(f"{option} {path} {where} {what} ({source}), which this command reads; "
                                f"fix: write the output somewhere else")
            if clash := reach[what].clash(path):
                raise UserError(f"{option} {path} {clash}, which {what} ({source}) reads; "
                                f"fix: write the output somewhere else")
            if option in folders and (_same_or_inside(Path(source), path) or reach[what].inside(path)):
                raise UserError(f"{option} {path} holds {what} ({source}), which this command reads; "
                                f"fix: write the output somewhere else")
    options = list(given)
    for i, first in enumerate(options):
        for second in options[i + 1:]:
            if _same_or_inside(given[first], given[second]) or _same_or_inside(given[second], given[first]):
                raise UserError(f"{first} and {second} both write {given[first]}; fix: give each its own path")
