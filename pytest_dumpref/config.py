"""``[tool.dumpref]`` in pyproject.toml: title, section order and titles, default tolerances."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(ValueError):
    pass


@dataclass
class DumprefConfig:
    title: str = "Claims about what the compiler did"
    intro: str = ""
    sections: list[str] = field(default_factory=list)       # order; empty = any section allowed
    section_titles: dict[str, str] = field(default_factory=dict)
    section_intros: dict[str, str] = field(default_factory=dict)
    default_tolerances: dict[str, float] = field(default_factory=dict)  # unit -> relative tolerance
    source: str = "(defaults)"

    def tolerance_for(self, unit: str | None, declared: float | None) -> float | None:
        if declared is not None:
            return declared
        return self.default_tolerances.get(unit) if unit else None

    def section_title(self, name: str) -> str:
        return self.section_titles.get(name, name)


def load(pyproject: Path | None) -> DumprefConfig:
    if pyproject is None or not pyproject.is_file():
        return DumprefConfig()
    try:
        data = tomllib.loads(pyproject.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{pyproject}: not valid TOML: {e}") from None
    raw = data.get("tool", {}).get("dumpref", {})
    known = {"title", "intro", "intro_file", "sections", "section_titles", "section_intros",
             "default_tolerances"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{pyproject}: [tool.dumpref] has unknown keys {unknown}; known: {sorted(known)}")
    for key in ("title", "intro", "intro_file"):
        if key in raw and not isinstance(raw[key], str):
            raise ConfigError(f"{pyproject}: [tool.dumpref] {key} must be a string, got {raw[key]!r}")
    for key in ("section_titles", "section_intros", "default_tolerances"):
        if key in raw and not isinstance(raw[key], dict):
            raise ConfigError(f"{pyproject}: [tool.dumpref] {key} must be a table "
                              f"([tool.dumpref.{key}]), got {raw[key]!r}")
    cfg = DumprefConfig(source=str(pyproject))
    for key in known & set(raw) - {"intro_file"}:
        setattr(cfg, key, raw[key])
    if "intro_file" in raw:  # a long introduction reads better as a Markdown file of its own
        intro = pyproject.parent / raw["intro_file"]
        try:
            cfg.intro = (cfg.intro + "\n\n" if cfg.intro else "") + intro.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{pyproject}: [tool.dumpref] intro_file {raw['intro_file']!r}: {e}") from None
    if not isinstance(cfg.sections, list) or not all(isinstance(s, str) for s in cfg.sections):
        raise ConfigError(f"{pyproject}: [tool.dumpref] sections must be a list of names")
    for unit, tol in cfg.default_tolerances.items():
        if not isinstance(tol, (int, float)) or tol < 0:
            raise ConfigError(f"{pyproject}: [tool.dumpref.default_tolerances] {unit} = {tol!r} is not a relative tolerance >= 0")
    return cfg
