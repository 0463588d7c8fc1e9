"""A component's checkpoint made safe to resume from before its query starts.

Three kinds of damage are mended, and anything else is refused with one line:

- A torn last entry of ``offsets/`` or ``commits/`` (a crash or a full disk mid-write on a
  store without atomic renames) is set aside as ``N.torn``: a torn plan is planned again,
  a torn commit replays its micro-batch, which the idempotent sinks skip. A torn entry with
  later ones after it is not the last write and is refused.
- A missing ``metadata`` file would make Spark start the query under a new id, and with it
  a new writer identity (``sinks.writer_id``): the replay of a micro-batch already written
  would be written again. The id is restored from the newest commit the component made to
  its output tables.
- A first micro-batch whose plan was never written whole (a crash while Spark wrote
  ``offsets/0`` under its temporary name, or a torn ``offsets/0``) leaves files in a log
  Spark requires empty at a query's first start: they are removed, and the first
  micro-batch is planned anew.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections.abc import Sequence

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from abstream.errors import UsageError
from abstream.io.checkpoint_log import parse_offset
from abstream.io.hadoop import HadoopFiles
from abstream.io.sinks import last_writer

log = logging.getLogger(__name__)

_VERSION = re.compile(r"^v\d+$")


def prepare_checkpoint(spark: SparkSession, component: str, location: str,
                       outputs: Sequence[str]) -> None:
    """Mend or refuse ``component``'s checkpoint at ``location``; ``outputs`` are the
    Delta tables it writes."""
    files = HadoopFiles(spark, location)
    _set_aside_torn_entry(files, location, component, "commits")
    planned = _set_aside_torn_entry(files, location, component, "offsets")
    if not planned:
        _clear_unplanned_start(files, location, component)
    elif not files.exists(posixpath.join(location, "metadata")):
        _restore_identity(spark, files, location, component, outputs)


#: What a crash during the first plan leaves in ``offsets/`` or ``commits/``: Spark's
#: temporary files and their checksums (hidden names), and a torn first entry set aside.
#: Nothing in ``state/`` is: state is written only once a plan is.
_LEFT_BY_A_CRASH = re.compile(r"^\..*|^\d+\.torn$")
#: The folders Spark requires empty when a query starts its first micro-batch.
_EMPTY_AT_FIRST_START = ("offsets", "commits", "state")


def _clear_unplanned_start(files: HadoopFiles, location: str, component: str) -> None:
    """Remove what a crash during the first plan left in a checkpoint that planned no
    micro-batch; refuse anything else there (it is no crash's)."""
    found = [(kind, name) for kind in _EMPTY_AT_FIRST_START
             for name in sorted(files.names(posixpath.join(location, kind)))]
    other = [posixpath.join(location, kind, name) for kind, name in found
             if kind == "state" or not _LEFT_BY_A_CRASH.match(name)]
    if other:
        raise UsageError(f"{component}: checkpoint {location} has planned no micro-batch, yet "
                         f"holds {', '.join(other[:3])}{', ...' if len(other) > 3 else ''}; "
                         f"restore the checkpoint from a backup, or delete {location} to "
                         "process all input again")
    for kind, name in found:
        files.delete(posixpath.join(location, kind, name), recursive=False)
    if found:
        log.warning("%s: its first micro-batch's plan was interrupted (a crash); removed %s, "
                    "the first micro-batch is planned anew", component,
                    ", ".join(f"{kind}/{name}" for kind, name in found))


def _set_aside_torn_entry(files: HadoopFiles, location: str, component: str,
                          kind: str) -> bool:
    """Whether the log has entries once a torn last one is set aside."""
    folder = posixpath.join(location, kind)
    entries = sorted(int(name) for name in files.names(folder) if name.isdigit())
    if not entries:
        return False
    batch, path = entries[-1], posixpath.join(folder, str(entries[-1]))
    previous = (files.read_text(posixpath.join(folder, str(entries[-2])))
                if len(entries) > 1 and kind == "offsets" else None)
    if _is_whole(_read(files, path), previous):
        return True
    if kind == "offsets" and files.exists(posixpath.join(location, "commits", str(batch))):
        raise UsageError(f"{component}: checkpoint entry {path} is damaged, yet its "
                         f"micro-batch was committed; restore the checkpoint from a backup, "
                         f"or delete {location} to process all input again")
    files.rename(path, posixpath.join(folder, f"{batch}.torn"))
    log.warning("%s: %s/%d was torn (an interrupted write); set aside as %d.torn, the "
                "micro-batch runs again", component, kind, batch, batch)
    return len(entries) > 1


def _read(files: HadoopFiles, path: str) -> str:
    """The entry's text; empty where the file system finds it damaged (a checksum that no
    longer matches, on a local disk)."""
    try:
        return files.read_text(path)
    except Py4JError:
        log.debug("cannot read %s", path, exc_info=True)
        return ""


def _is_whole(text: str, previous: str | None) -> bool:
    """Whether a log entry is complete: a version line, then JSON lines (``-`` for a source
    without an offset), as many as the ``previous`` entry has where it is given."""
    lines = text.split("\n")
    if previous is not None and len(lines) != len(previous.split("\n")):
        return False
    if len(lines) < 2 or not _VERSION.match(lines[0]):
        return False
    try:
        for line in lines[1:]:
            if not line.strip():
                return False
            parse_offset(line)
    except ValueError:
        return False
    return True


def _restore_identity(spark: SparkSession, files: HadoopFiles, location: str,
                      component: str, outputs: Sequence[str]) -> None:
    writer = next((w for path in outputs
                   if (w := last_writer(spark, path, f"abstream-{component}-"))), None)
    if writer is None:
        log.warning("%s: checkpoint %s has no metadata file and nothing of it was written "
                    "yet; its query starts under a new id", component, location)
        return
    query_id = writer.removeprefix(f"abstream-{component}-")
    files.write_text(posixpath.join(location, "metadata"), json.dumps({"id": query_id}))
    log.warning("%s: checkpoint %s had no metadata file; restored its query id %s from its "
                "last write, so replayed micro-batches are not written twice", component,
                location, query_id)
