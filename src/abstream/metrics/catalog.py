"""Reading catalogs: the default one shipped in the package, and files of definitions."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from abstream.errors import ConfigError
from abstream.metrics.definitions import Catalog, Definition
from abstream.rendering import render_table


@cache
def default_catalog() -> Catalog:
    """The catalog shipped in the package (``resources/metrics.yaml``)."""
    text = (resources.files("abstream") / "resources" / "metrics.yaml").read_text("utf-8")
    return Catalog.model_validate(yaml.safe_load(text))


def default_definitions() -> list[Definition]:
    return list(default_catalog().definitions)


def problems(raw: Any) -> list[str]:
    """One line per problem of a catalog (``{definitions: [...]}``), naming the definition
    and the key."""
    try:
        Catalog.model_validate(raw)
    except ValidationError as exc:
        return [_line(raw, error) for error in exc.errors()]
    return []


def _line(raw: Any, error: Any) -> str:
    loc = [str(p) for p in error["loc"]]
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    if len(loc) >= 2 and loc[0] == "definitions" and loc[1].isdigit():
        index = int(loc[1])
        entry = raw["definitions"][index]
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"definition {name!r}" if name else f"definition #{index + 1}"
        key = ".".join(p for p in loc[2:] if not _is_branch(p))
        return f"{where}: {key}: {message}" if key else f"{where}: {message}"
    return f"{'.'.join(loc) or 'catalog'}: {message}"


def _is_branch(part: str) -> bool:
    """A pydantic location step that names a validator or a union branch, not a key."""
    return "[" in part or part.startswith("function-")


def render_catalog(catalog: Catalog, *, as_yaml: bool = False) -> str:
    """The catalog as a table (name, kind, unit, role, better, fingerprint, parts), or as
    YAML that ``metrics.definitions`` takes."""
    if as_yaml:
        return yaml.safe_dump(catalog.model_dump(mode="json", by_alias=True,
                                                 exclude_defaults=True), sort_keys=False)
    rows = [("name", "kind", "unit", "role", "better", "fingerprint", "parts")]
    rows += [(d.name, d.kind, d.unit, d.role, d.better, d.fingerprint, " ".join(d.parts()))
             for d in catalog.definitions]
    text = render_table(rows, left=range(7))
    if catalog.dimensions:
        dimensions = [("dimension", "property", "max values")]
        dimensions += [(d.name, d.property, str(d.max_values)) for d in catalog.dimensions]
        text += "\n\n" + render_table(dimensions, left=(0, 1))
    return text


def read_catalog_file(path: Path) -> Any:
    """The definitions in ``path``: a catalog (``definitions:``) or a config file
    (``metrics.definitions``), as read from YAML."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where} is not valid YAML") from None
    if isinstance(loaded, dict) and isinstance(loaded.get("metrics"), dict):
        loaded = loaded["metrics"]
    if not isinstance(loaded, dict) or "definitions" not in loaded:
        raise ConfigError(f"{path}: no definitions (a list under 'definitions:' or "
                          "'metrics: definitions:')")
    return {key: loaded[key] for key in ("definitions", "dimensions") if key in loaded}
