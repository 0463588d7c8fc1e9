"""Small files on whatever file system holds a location (local, HDFS, S3, ...), through
the Hadoop client of the running Spark session."""

from __future__ import annotations

import posixpath
import uuid

from pyspark.sql import SparkSession


class HadoopFiles:
    """The file system of ``location``, for paths under it."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        jvm = spark._jvm
        self._jvm = jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(location).getFileSystem(spark._jsc.hadoopConfiguration())

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def last_change_ms(self, folder: str) -> int:
        """When ``folder`` or any entry in it last changed (epoch milliseconds; entries
        added or removed count). The entries' times come with their listing, so an entry
        renamed or removed meanwhile is no error."""
        folder_path = self._path(folder)
        return max([int(self._fs.getFileStatus(folder_path).getModificationTime()),
                    *(int(status.getModificationTime())
                      for status in self._fs.listStatus(folder_path))])

    def names(self, folder: str) -> list[str]:
        """The names in ``folder``; none when it does not exist."""
        if not self.exists(folder):
            return []
        return [status.getPath().getName() for status in self._fs.listStatus(self._path(folder))]

    def read_text(self, path: str) -> str:
        stream = self._fs.open(self._path(path))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        """Write ``path`` whole, replacing it if it exists: into a hidden file beside it
        first, then renamed, so that a crash leaves the old file, the new one or none, never
        a torn one (where the file system renames atomically, as local and HDFS ones do)."""
        folder, name = posixpath.split(path)
        temporary = posixpath.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
        out = self._fs.create(self._path(temporary), True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        self._fs.delete(self._path(path), False)
        if not self._fs.rename(self._path(temporary), self._path(path)):
            self._fs.delete(self._path(temporary), False)
            raise OSError(f"cannot write {path}")

    def rename(self, path: str, to: str) -> None:
        self._fs.rename(self._path(path), self._path(to))

    def delete(self, path: str, *, recursive: bool = True) -> bool:
        """Delete ``path``; with ``recursive=False`` a folder only while it is empty.
        Whether it was deleted."""
        return bool(self._fs.delete(self._path(path), recursive))

    def make_dirs(self, folder: str) -> None:
        self._fs.mkdirs(self._path(folder))
