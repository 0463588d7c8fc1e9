"""What a Structured Streaming checkpoint says a query has processed.

``offsets/N`` holds the end offsets planned for micro-batch N (one line per source, in the
order of the query's sources, ``-`` where a source has none); ``commits/N`` appears once
batch N has been written. Only committed batches count as processed. For file sources,
``sources/<i>/`` logs which files each batch took (``K.compact`` files hold all entries up
to batch K).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from abstream.io.storage import Storage


@dataclass(frozen=True)
class Committed:
    """The last committed micro-batch: its id, when it was committed, its end offsets."""

    batch_id: int
    committed_ms: int
    offsets: tuple[dict | None, ...]


@dataclass
class CheckpointReader:
    """Reads one checkpoint; re-reads the offsets only when a new batch has committed."""

    location: str
    storage: Storage = field(init=False)
    _last: Committed | None = field(default=None, init=False)
    _file_logs: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict, init=False)
    _file_log_batch: dict[int, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.storage = Storage(self.location)

    def committed(self) -> Committed | None:
        """The last committed batch, or None when no batch has committed (or no checkpoint)."""
        commits = [e for e in self.storage.list(self.storage.path("commits"))
                   if e.name.isdigit()]
        if not commits:
            self._last = None
            return None
        newest = max(commits, key=lambda e: int(e.name))
        batch_id = int(newest.name)
        if self._last is None or self._last.batch_id != batch_id:
            self._last = Committed(batch_id, newest.mtime_ms, self.planned(batch_id) or ())
        return self._last

    def planned(self, batch_id: int) -> tuple[dict | None, ...] | None:
        """The end offsets planned for micro-batch ``batch_id``, one per source; None when
        the checkpoint no longer (or not yet) has them."""
        path = self.storage.path("offsets", str(batch_id))
        if self.storage.entry(path) is None:
            return None
        lines = self.storage.read_text(path).splitlines()[2:]
        return tuple(parse_offset(line) for line in lines)

    def file_source_index(self, folder: str) -> int | None:
        """Which of the query's sources (``sources/<i>``) is a file source over ``folder``."""
        for entry in self.storage.list(self.storage.path("sources")):
            if not entry.name.isdigit():
                continue
            files = self.processed_files(int(entry.name), None)
            if any(_same_folder(path, folder) for path in files):
                return int(entry.name)
        return None

    def processed_files(self, index: int, up_to_batch: int | None) -> dict[str, tuple[int, int]]:
        """path -> (file modification time ms, source batch id) of the files file source
        ``index`` has taken, in source batches up to ``up_to_batch`` (all when None)."""
        entries = self._file_logs.setdefault(index, {})
        folder = self.storage.path("sources", str(index))
        logs = {}
        for entry in self.storage.list(folder):
            name = entry.name.removesuffix(".compact")
            if name.isdigit():
                logs[int(name)] = entry
        read_through = self._file_log_batch.get(index, -1)
        pending = sorted(n for n in logs if n > read_through)
        compacts = [n for n in pending if logs[n].name.endswith(".compact")]
        start = compacts[-1] if compacts else None
        for number in pending:
            if start is not None and number < start:
                continue
            for line in self.storage.read_text(logs[number].path).splitlines()[1:]:
                if line.strip():
                    item = json.loads(line)
                    entries[normalise_path(item["path"])] = (int(item["timestamp"]),
                                                         int(item["batchId"]))
            read_through = number
        self._file_log_batch[index] = read_through
        if up_to_batch is None:
            return entries
        return {p: v for p, v in entries.items() if v[1] <= up_to_batch}


def parse_offset(line: str) -> dict | None:
    """One source's offset: JSON, ``-`` for none; the v2 log format prefixes a source id.
    ValueError where the line is neither."""
    text = line.strip()
    if text in ("", "-") or text.endswith(":-"):
        return None
    return json.loads(text[text.index("{"):])


def normalise_path(path: str) -> str:
    """file:///a/b, file:/a/b and /a/b name the same local file."""
    if path.startswith("file:"):
        return "/" + path.removeprefix("file:").lstrip("/")
    return path


def _same_folder(path: str, folder: str) -> bool:
    return path.rsplit("/", 1)[0] == normalise_path(folder).rstrip("/")
