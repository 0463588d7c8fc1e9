"""Reading files wherever they live (a local folder, S3, HDFS, ...) through pyarrow."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow.fs as pafs

from abstream.layout import is_uri

#: Hadoop's S3 schemes read through pyarrow's S3 file system.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    size: int
    mtime_ms: int
    is_dir: bool


class Storage:
    """A folder's file system and path, with the few calls the lag monitor needs."""

    def __init__(self, location: str) -> None:
        if is_uri(location):
            scheme = urlparse(location).scheme
            if scheme in _SCHEME_ALIASES:
                location = _SCHEME_ALIASES[scheme] + location[len(scheme):]
            self.fs, self.root = pafs.FileSystem.from_uri(location)
        else:
            self.fs = pafs.LocalFileSystem()
            self.root = location.removeprefix("file://").removeprefix("file:")
        self.root = self.root.rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def entry(self, path: str) -> Entry | None:
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        return _entry(info)

    def list(self, path: str) -> list[Entry]:
        """The entries of a folder (none when it does not exist)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except NotADirectoryError:
            return []
        return [_entry(info) for info in infos]

    def files_below(self, path: str) -> list[Entry]:
        """The files of a folder and of all its subfolders (none when it does not exist)."""
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=True,
                                                        allow_not_found=True))
        return [_entry(info) for info in infos if info.type == pafs.FileType.File]

    def read_text(self, path: str) -> str:
        with self.fs.open_input_stream(path) as stream:
            return stream.read().decode("utf-8")


def _entry(info: pafs.FileInfo) -> Entry:
    mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
    return Entry(info.base_name, info.path, info.size or 0, mtime,
                 info.type == pafs.FileType.Directory)
