"""``[tool.dumpref]`` in pyproject.toml: title, sections (which are also the section markers)
and the word for one (``section_word``, "study"), where the claims live, default tolerances."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .measured import Rule
from .provenance import CORE_FIELDS

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
    section_word: str = "study"                             # what the write-up calls a section
    recordings: str = "recordings"                          # evidence recorded on a chip (recording.py)
    source: str = "(defaults)"
    # Set by the plugin from its extensions (pytest_dumpref.hookspec), not by [tool.dumpref]:
    # the environment table's rows, (name, rule, rank), and what a claim's evidence folders hold.
    environment_fields: list = field(default_factory=lambda: list(CORE_FIELDS))
    evidence_folders: str | None = None

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
             "default_tolerances", "claims", "setup", "measured", "benchmark_tolerance", "section_word",
             "recordings"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{pyproject}: [tool.dumpref] has unknown keys {unknown}; known: {sorted(known)}")
    for key in ("title", "intro", "intro_file", "setup", "section_word", "recordings"):
        if key in raw and not isinstance(raw[key], str):
            raise ConfigError(f"{pyproject}: [tool.dumpref] {key} must be a string, got {raw[key]!r}")
    word = raw.get("section_word", "study")
    if not word.strip() or "\n" in word or word != word.strip():
        raise ConfigError(f"{pyproject}: [tool.dumpref] section_word must be one word or phrase on one line "
                          f"(\"study\", \"part\"), got {word!r}")
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
    known = set(default.__dataclass_fields__) - {"same_machine"}   # the check's to decide, per run
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{pyproject}: [tool.dumpref.measured] has unknown keys {unknown}; known: "
                          f"{sorted(known)}")
    lows = {"sigmas": 0, "floor": 0, "resolution": 1, "reruns": 0}
    for key, value in raw.items():
        low = lows[key]
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > low if key != "floor" \
            else not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0
        if key == "reruns":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 20
        if not ok:
            bound = {"sigmas": "a number > 0", "floor": "a relative number >= 0",
                     "resolution": "a factor > 1", "reruns": "a whole number from 0 to 20"}[key]
            raise ConfigError(f"{pyproject}: [tool.dumpref.measured] {key} = {value!r} must be {bound}")
    values: dict[str, Any] = {k: (int(v) if k == "reruns" else float(v)) for k, v in raw.items()}
    return Rule(**values)
