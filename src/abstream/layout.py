"""Where everything lives under the data directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    """Folders and Delta tables of one abstream deployment, all below ``data_dir``."""

    data_dir: Path

    @property
    def landing(self) -> Path:
        return self.data_dir / "landing"

    @property
    def events(self) -> Path:
        return self.data_dir / "tables" / "events"

    @property
    def rejected(self) -> Path:
        return self.data_dir / "tables" / "rejected"

    @property
    def sessions(self) -> Path:
        return self.data_dir / "tables" / "sessions"

    @property
    def experiment_metrics(self) -> Path:
        return self.data_dir / "tables" / "experiment_metrics"

    def checkpoint(self, component: str) -> Path:
        return self.data_dir / "checkpoints" / component
