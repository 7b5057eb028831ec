"""``[tool.dumpref]`` in pyproject.toml: title, sections (which are also the study markers),
where the claims live, default tolerances."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .measured import Rule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(ValueError):
    pass


# With no sections configured, every claim belongs to this one section; its heading is
# DEFAULT_SECTION_TITLE unless section_titles names it.
DEFAULT_SECTION = "general"
DEFAULT_SECTION_TITLE = "Claims"


@dataclass
class DumprefConfig:
    title: str = "Claims about what the compiler did"
    intro: str = ""
    sections: list[str] = field(default_factory=list)       # order; empty = the default section
    claims: list[str] = field(default_factory=list)         # rootdir-relative paths of the claim files
    setup: str = ""                                         # the command that installs what the claims need
    section_titles: dict[str, str] = field(default_factory=dict)
    section_intros: dict[str, str] = field(default_factory=dict)
    default_tolerances: dict[str, float] = field(default_factory=dict)  # unit -> relative tolerance
    measured: Rule = field(default_factory=Rule)            # how the check judges measured values
    benchmark_tolerance: float | None = None                # pytest-benchmark claims: None = by noise
    source: str = "(defaults)"

    def tolerance_for(self, unit: str | None, declared: float | None) -> float | None:
        if declared is not None:
            return declared
        return self.default_tolerances.get(unit) if unit else None

    def section_title(self, name: str) -> str:
        if name == DEFAULT_SECTION and name not in self.section_titles:
            return DEFAULT_SECTION_TITLE
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
             "default_tolerances", "claims", "setup", "measured", "benchmark_tolerance"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{pyproject}: [tool.dumpref] has unknown keys {unknown}; known: {sorted(known)}")
    for key in ("title", "intro", "intro_file", "setup"):
        if key in raw and not isinstance(raw[key], str):
            raise ConfigError(f"{pyproject}: [tool.dumpref] {key} must be a string, got {raw[key]!r}")
    for key in ("section_titles", "section_intros", "default_tolerances"):
        if key in raw and not isinstance(raw[key], dict):
            raise ConfigError(f"{pyproject}: [tool.dumpref] {key} must be a table "
                              f"([tool.dumpref.{key}]), got {raw[key]!r}")
    cfg = DumprefConfig(source=str(pyproject))
    for key in known & set(raw) - {"intro_file", "measured"}:
        setattr(cfg, key, raw[key])
    if "intro_file" in raw:  # a long introduction reads better as a Markdown file of its own
        intro = pyproject.parent / raw["intro_file"]
        try:
            cfg.intro = (cfg.intro + "\n\n" if cfg.intro else "") + intro.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{pyproject}: [tool.dumpref] intro_file {raw['intro_file']!r}: {e}") from None
    if not isinstance(cfg.sections, list) or not all(isinstance(s, str) for s in cfg.sections):
        raise ConfigError(f"{pyproject}: [tool.dumpref] sections must be a list of names")
    for name in cfg.sections:
        if not name.isidentifier():
            raise ConfigError(f"{pyproject}: [tool.dumpref] section {name!r} is also a marker name "
                              f"(@pytest.mark.{name}) and must be a Python identifier")
    if isinstance(cfg.claims, str):
        cfg.claims = [cfg.claims]
    if not isinstance(cfg.claims, list) or not all(isinstance(c, str) and c for c in cfg.claims):
        raise ConfigError(f"{pyproject}: [tool.dumpref] claims must be a path or a list of paths "
                          f"(relative to {pyproject.parent}), e.g. claims = [\"claims\"]")
    cfg.measured = _measured_rule(pyproject, raw.get("measured", {}))
    bt = cfg.benchmark_tolerance
    if bt is not None and (isinstance(bt, bool) or not isinstance(bt, (int, float)) or bt < 0):
        raise ConfigError(f"{pyproject}: [tool.dumpref] benchmark_tolerance = {bt!r} is not a relative tolerance >= 0")
    for unit, tol in cfg.default_tolerances.items():
        if not isinstance(tol, (int, float)) or tol < 0:
            raise ConfigError(f"{pyproject}: [tool.dumpref.default_tolerances] {unit} = {tol!r} is not a relative tolerance >= 0")
    return cfg


def _measured_rule(pyproject: Path, raw) -> Rule:
    """``[tool.dumpref.measured]``: sigmas, floor, resolution, reruns (see measured.Rule)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{pyproject}: [tool.dumpref] measured must be a table ([tool.dumpref.measured]), got {raw!r}")
    default = Rule()
    unknown = sorted(set(raw) - set(default.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"{pyproject}: [tool.dumpref.measured] has unknown keys {unknown}; known: "
                          f"{sorted(default.__dataclass_fields__)}")
    limits = {"sigmas": (0, None), "floor": (0, None), "resolution": (1, None), "reruns": (0, 20)}
    for key, value in raw.items():
        low, high = limits[key]
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > low if key != "floor" \
            else not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0
        if key == "reruns":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high
        if not ok:
            bound = {"sigmas": "a number > 0", "floor": "a relative number >= 0",
                     "resolution": "a factor > 1", "reruns": "a whole number from 0 to 20"}[key]
            raise ConfigError(f"{pyproject}: [tool.dumpref.measured] {key} = {value!r} must be {bound}")
    return Rule(**{k: (int(v) if k == "reruns" else float(v)) for k, v in raw.items()})
