"""Evidence recorded on a chip, replayed where that chip is absent.

A claim that needs a chip says so (``@pytest.mark.platform("tpu")``).  Where jax's default
backend is that platform, its fixtures run live and their results go into the claim's
recording: one ``.tar.xz`` file per claim in the folder ``[tool.dumpref] recordings`` names
(default ``recordings``), holding ``recording.json`` and, per compile, the dump files the
analyses read.  Anywhere else the fixtures hand the claim its recording instead of compiling,
and the claim's body runs as usual: every number it derives is recomputed from the recorded
files.

Each compile in a recording is keyed by the program as lowered for the recording's platform
(jax lowers for a TPU on a machine without one) and its compile options, so a claim whose
program, shapes or options changed finds no entry and fails, naming the claim, the recording
and the command that records it again on the chip: old evidence is never replayed silently.
Every file of a recording carries its sha256 in ``recording.json``; a byte changed by hand, a
truncated archive or another chip's recording is an error naming the file.

Modes, after pytest-recording (``--dumpref-record``): ``none`` replays even on the chip; ``once``
(the default) runs live on the chip and records a claim that has no recording, and replays
elsewhere; ``all`` runs live on the chip and records every claim again (elsewhere: an error,
nothing can be recorded without the chip).  This module knows no jax: ``xla/dump.py`` makes the
keys and the dumps, ``jax_fixtures.py`` chooses the mode.
"""
from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import re
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1
INDEX = "recording.json"
MODES = ("none", "once", "all")
DEFAULT_FOLDER = "recordings"


class RecordingError(Exception):
    """A recording that cannot be used; the message names the claim, the file and what to run."""


def key_of(platform: str, lowered_text: str, options: dict) -> str:
    """The key of one compile: sha256 of the platform, the program as lowered for it, and the
    compile options (where the dump goes left out: it is a temporary folder)."""
    opts = {k: v for k, v in sorted(options.items()) if k != "xla_dump_to"}
    blob = json.dumps({"platform": platform, "options": opts}, sort_keys=True) + "\n" + lowered_text
    return hashlib.sha256(blob.encode()).hexdigest()


def path_for(folder: Path, nodeid: str) -> Path:
    """``<folder>/<test file without .py>/<test name>.tar.xz`` for a claim's node id."""
    file, _, name = nodeid.partition("::")
    stem = Path(file).with_suffix("")
    return Path(folder) / stem / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".tar.xz")


def rerecord_command(nodeid: str) -> str:
    return f"python -m pytest '{nodeid}' --dumpref-record=all"


@dataclass
class Entry:
    """One compile of a recording: its key, what it was (function, options, parameters), its
    files (name -> sha256) and what the compiled executable said (``extra``: its cost analysis)."""
    key: str
    what: str
    files: dict
    extra: dict = field(default_factory=dict)


@dataclass
class Recording:
    """One claim's recording, read (``open``) or being made (``add`` then ``write``)."""
    path: Path
    claim: str
    platform: str
    chip: str
    environment: dict
    recorded: str                       # the day it was recorded, YYYY-MM-DD
    entries: dict = field(default_factory=dict)      # key -> Entry
    _members: dict = field(default_factory=dict, repr=False)   # "<n>/<file>" -> bytes
    sha256: str = ""                    # of the archive file, once written or read

    # -- reading ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, claim: str) -> "Recording":
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise RecordingError(f"{claim}: its recording {path} cannot be read ({e.strerror or e})") from None
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
                members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
        except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
            raise RecordingError(f"{path}: not a whole recording (truncated or not an xz tar archive: "
                                 f"{e}); record it again: {rerecord_command(claim)}") from None
        if INDEX not in members:
            raise RecordingError(f"{path}: no {INDEX} in it: not a pytest-dumpref recording")
        try:
            index = json.loads(members.pop(INDEX))
            if index.get("format") != FORMAT:
                raise RecordingError(f"{path}: recording format {index.get('format')!r}, this pytest-dumpref "
                                     f"reads format {FORMAT}; record it again: {rerecord_command(claim)}")
            rec = cls(path, index["claim"], index["platform"], index["chip"], index["environment"],
                      index["recorded"], sha256=hashlib.sha256(data).hexdigest())
            for item in index["entries"]:
                rec.entries[item["key"]] = Entry(item["key"], item["what"], dict(item["files"]),
                                                 dict(item.get("extra", {})))
        except (ValueError, KeyError, TypeError) as e:
            raise RecordingError(f"{path}: {INDEX} is not a recording's index ({type(e).__name__}: {e})") from None
        for n, entry in enumerate(rec.entries.values()):
            for name, digest in entry.files.items():
                blob = members.get(f"{n}/{name}")
                if blob is None:
                    raise RecordingError(f"{path}: {n}/{name} is listed in {INDEX} but missing")
                if hashlib.sha256(blob).hexdigest() != digest:
                    raise RecordingError(f"{path}: {n}/{name} was changed after it was recorded (its sha256 "
                                         f"is not the one {INDEX} lists); record it again on the chip: "
                                         f"{rerecord_command(claim)}")
                rec._members[f"{n}/{name}"] = blob
        if rec.claim != claim:
            raise RecordingError(f"{path}: the recording of {rec.claim}, not of {claim}")
        return rec

    def entry(self, key: str, what: str) -> tuple[int, Entry]:
        """The entry of ``key`` (its number in the archive); RecordingError when the recording
        does not hold it: the program or its options changed since it was recorded."""
        for n, (k, e) in enumerate(self.entries.items()):
            if k == key:
                return n, e
        held = "; ".join(e.what for e in self.entries.values()) or "nothing"
        raise RecordingError(
            f"{self.claim}: its recording {self.path} holds no compile of {what} as this run lowers it "
            f"for {self.platform} (the program, its shapes or its options changed since it was recorded "
            f"on {self.recorded} with jax {self.environment.get('jax')}; it holds: {held}). Old evidence "
            f"is not replayed: record it again where jax's default backend is {self.platform}: "
            f"{rerecord_command(self.claim)}")

    def extract(self, n: int, entry: Entry, folder: Path) -> list[Path]:
        """Write the files of entry ``n`` into ``folder``; their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for name in entry.files:
            p = folder / name
            p.write_bytes(self._members[f"{n}/{name}"])
            out.append(p)
        return out

    # -- making -------------------------------------------------------------------------
    def add(self, key: str, what: str, files: list[Path], extra: dict | None = None) -> None:
        n = len(self.entries)
        if key in self.entries:
            return          # the same compile twice in one claim: one entry
        digests = {}
        for p in files:
            blob = Path(p).read_bytes()
            digests[p.name] = hashlib.sha256(blob).hexdigest()
            self._members[f"{n}/{p.name}"] = blob
        self.entries[key] = Entry(key, what, digests, dict(extra or {}))

    def write(self) -> Path:
        """Write the archive atomically (a temporary file renamed into place); its path."""
        index = {"format": FORMAT, "claim": self.claim, "platform": self.platform, "chip": self.chip,
                 "environment": self.environment, "recorded": self.recorded,
                 "entries": [{"key": e.key, "what": e.what, "files": e.files, "extra": e.extra}
                             for e in self.entries.values()]}
        members = {INDEX: json.dumps(index, indent=1, sort_keys=True).encode(), **self._members}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz", preset=9) as tar:
            for name, blob in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(blob), 0, 0o644
                tar.addfile(info, io.BytesIO(blob))
        data = buf.getvalue()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".recording-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)      # a file to commit, readable as any other
        os.replace(tmp, self.path)
        self.sha256 = hashlib.sha256(data).hexdigest()
        return self.path

    def describe(self) -> dict:
        """Where and when the evidence was recorded, for the claim's evidence table."""
        env = ", ".join(f"{k} {v}" for k, v in sorted(self.environment.items()))
        return {"recording": str(self.path), "chip": self.chip, "recorded on": self.recorded,
                "recorded with": env, "compiles": len(self.entries)}


@dataclass(frozen=True)
class RecordingPlan:
    """A claim that needs a chip, as the core sees it before anything compiles: where its
    recording is (``path``), ``--dumpref-record``'s mode, the ``platform`` it needs, its node
    id, the chip its provenance declares (None: any) and the rootdir paths are shown from."""
    path: Path
    mode: str | None
    platform: str
    claim: str
    declared_chip: str | None
    rootdir: Path

    def shown_path(self) -> str:
        try:
            return self.path.relative_to(self.rootdir).as_posix()
        except ValueError:
            return str(self.path)


def check_chip(recording: Recording, declared: str | None) -> None:
    """A recording made on another chip than the one the claim declares is refused by name."""
    if declared and recording.chip != declared:
        raise RecordingError(f"{recording.claim}: its recording {recording.path} was made on {recording.chip!r}, "
                             f"and the claim declares chip {declared!r}; record it on that chip: "
                             f"{rerecord_command(recording.claim)}")


def choose(mode: str | None, platform: str, here: str | None, path: Path, claim: str) -> str:
    """What a claim needing ``platform`` does where jax's default backend is ``here``:
    "live" (measure, do not record), "record" (measure and write the recording) or "replay".
    RecordingError where it can do none (a recording missing off the chip, or ``all`` there)."""
    mode = mode or "once"
    if mode not in MODES:
        raise RecordingError(f"--dumpref-record={mode}: one of {', '.join(MODES)}")
    on_chip = here == platform
    if on_chip and mode == "all":
        return "record"
    if on_chip and mode == "once":
        return "live" if path.is_file() else "record"
    if not on_chip and mode == "all":
        raise RecordingError(f"{claim}: --dumpref-record=all records on {platform}, and jax's default backend "
                             f"here is {here}: nothing can be recorded without the chip")
    if not path.is_file():
        raise RecordingError(f"{claim} needs evidence from {platform}, and there is no recording {path} to "
                             f"replay where jax's default backend is {here}: record it where it is {platform}: "
                             f"python -m pytest '{claim}' --dumpref-record=once")
    return "replay"
