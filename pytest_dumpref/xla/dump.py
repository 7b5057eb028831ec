"""XLA dumps as evidence: compile with per-compile dump options into a folder, and read any
dump folder back as ordered pass snapshots.

One reader serves both the fixtures (``DumpSession.dump`` / ``.unfused``) and the command line
(``tour``, for folders written anywhere with ``XLA_FLAGS=--xla_dump_to=DIR``), so what a claim
sees and what a user sees are the same thing.

How a backend names its files (the CPU's, the TPU's, the GPU's) is ``naming.py``'s table;
this file asks it and never parses a file name itself.
"""
from __future__ import annotations

import difflib
import hashlib
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterable

from . import naming, xla_private
from .fusion_log import LOG_SUFFIXES, fusion_decisions_in_folder, fusion_log_files
from .hlo import HloParseError, parse_module
from .traffic import module_traffic

# Dump files whose bytes differ between two identical compiles (checked by
# tests/xla_dumps/test_dump_files.py): the debug options embed the dump path and run-specific
# flags; the fusion explorer html embeds compressed graphs whose bytes vary.  Object files and
# LLVM IR are not HLO evidence.  Everything else is hashed, with source locations removed
# (they hold absolute paths of the caller, which differ between checkouts).
_HASHED_SUFFIXES = (".txt",)
_SOURCE_INFO_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_METADATA = re.compile(r", metadata=\{[^{}]*\}")

MANIFEST = "dumpref-manifest.txt"


class DumpError(Exception):
    """A dump that cannot be read or a compile that did not do what was asked.
    The message names the file, module or pass."""


# ---- one pass snapshot -------------------------------------------------------------------

class LazyHloFile:
    """An HLO text file (``self.path``) read and parsed on first use; the dataclasses that
    use it declare ``_text`` and ``_module`` fields."""
    # for the type checker only: the dataclasses that use it declare these fields themselves
    path: Path
    _text: str | None
    _module: Any

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = read_text(self.path)
        return self._text

    @property
    def module(self):
        """The parsed module (hlo.HloModule), parsed on first use."""
        if self._module is None:
            self._module = parse_file(self.path, self.text)
        return self._module


@dataclass
class Snapshot(LazyHloFile):
    """The module as it stood at one point of the pipeline.

    ``after`` is the pass that just ran (``pipeline-start`` for the first snapshot of a
    pipeline run); ``before`` the pass about to run (None for copy-insertion's mid-pass
    snapshots, whose ``after`` names a stage of that pass).  ``step`` orders the snapshots of
    a module; ``text`` and ``module`` (an hlo.HloModule) are read on first use.

    Example (``d`` a Dump)::

        after_fusion = [s for s in d.snapshots if s.after == "fusion"]
        print(after_fusion[0].label)      # 0017 HLO_passes_after_layout_assignment: after fusion, before fusion-wrapper
        kernels = after_fusion[0].module.entry.instructions
    """
    step: int
    pipeline: str
    after: str
    before: str | None
    path: Path
    _module: Any = field(default=None, repr=False, compare=False)
    _text: str | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.step:04d} {self.pipeline}: after {self.after}" + (
            f", before {self.before}" if self.before else "")

    def drop_cache(self) -> None:
        self._module = None
        self._text = None


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DumpError(f"{path}: not HLO text (not UTF-8: {e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DumpError(f"{path}: cannot be read ({e.strerror})") from None


def parse_file(path: Path, text: str | None = None):
    """Parse one HLO text file; any parse failure becomes a DumpError naming the file."""
    if text is None:
        text = read_text(path)
    try:
        module = parse_module(text, source=str(path))
    except HloParseError as e:
        msg = str(e)
        raise DumpError(msg if str(path) in msg else f"{path}: {msg}") from None
    if not re.search(r"^ENTRY ", text, re.M):   # XLA's parser would take the last computation
        raise DumpError(f"{path}: no ENTRY computation, which XLA writes in every dump file "
                        f"(truncated?)")
    return module


def snapshots_of(files: "ModuleFiles") -> list[Snapshot]:
    """The pass snapshots of one module's files, in step order; DumpError naming the file whose
    name is not a snapshot's (``naming.parse_stage``)."""
    out: list[Snapshot] = []
    previous = None
    for step, rest, path in files.snapshot_paths:
        try:
            previous = naming.parse_stage(rest, previous)
        except ValueError:
            raise DumpError(f"{path}: not a pass snapshot name (expected <step>.<pipeline>."
                            f"after_<pass>[.before_<pass>] or <step>.<pass>.before_<stage>)") from None
        out.append(Snapshot(step, previous.pipeline, previous.after, previous.before, path))
    return out


# ---- the files of one module in a folder ---------------------------------------------------

@dataclass
class ModuleFiles:
    """Every file XLA wrote for one compiled module (one ``module_NNNN.<name>`` prefix)."""
    folder: Path
    id: str
    name: str
    before_optimizations: Path | None = None
    optimized: Path | None = None
    buffer_assignment: Path | None = None
    memory_usage_report: Path | None = None
    snapshot_paths: list = field(default_factory=list)   # (step, rest, path)
    other: list = field(default_factory=list)
    tails: list = field(default_factory=list)            # every file name after the module's
    backend: str | None = None                           # by naming.backend_of_names
    debug_options: Path | None = None                    # the compile's options, as text

    def disabled_passes(self) -> list[str]:
        """The passes the compile was told to skip (``xla_disable_hlo_passes`` in the
        ``debug_options`` file XLA writes beside the module); [] without that file."""
        if self.debug_options is None:
            return []
        m = re.search(r'^\s*xla_disable_hlo_passes:\s*"([^"]*)"', read_text(self.debug_options), re.M)
        return [p for p in (m.group(1).split(",") if m else []) if p]

    @property
    def key(self) -> str:
        return f"module_{self.id}.{self.name}"


class DumpFolder:
    """A folder of XLA dumps, possibly holding several modules (every jit XLA compiled while
    ``XLA_FLAGS=--xla_dump_to`` was set)."""

    def __init__(self, folder) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise DumpError(f"{self.folder}: not a folder")
        self.modules: list[ModuleFiles] = _discover(self.folder)
        if not self.modules:
            n = sum(1 for _ in self.folder.iterdir())
            raise DumpError(
                f"{self.folder}: no XLA module dumps ({n} entries, none named like "
                f"module_NNNN.<name>.before_optimizations.txt; was it written with "
                f"--xla_dump_to and --xla_dump_hlo_as_text?)")

    def find(self, module: str | None = None) -> list[ModuleFiles]:
        """Modules matching ``module``: a name (``jit_softmax``), a key
        (``module_0004.jit_softmax``) or an id (``0004``); all when None."""
        if module is None:
            return list(self.modules)
        want = module.strip()
        return [m for m in self.modules
                if want in (m.key, m.name, m.id, f"module_{m.id}") or want.lstrip("0") == m.id.lstrip("0")]

    def dump(self, module: str | None = None) -> "Dump":
        found = self.find(module)
        listing = ", ".join(m.key for m in self.modules)
        if not found:
            raise DumpError(f"{self.folder}: no module {module!r} (modules: {listing})")
        if len(found) > 1:
            which = "" if module is None else f" named {module!r}"
            raise DumpError(f"{self.folder} holds {len(found)} modules{which}: "
                            f"{', '.join(m.key for m in found)}; name one (module=...)")
        return Dump(found[0])


def _discover(folder: Path) -> list[ModuleFiles]:
    modules: dict[str, ModuleFiles] = {}

    def get(mid: str, name: str) -> ModuleFiles:
        key = f"{mid}.{name}"
        if key not in modules:
            modules[key] = ModuleFiles(folder, mid, name)
        return modules[key]

    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    # Module names come from before_optimizations files first, so that a dotted module name
    # is never mistaken for "<name>.<step>".
    known: dict[str, str] = {}
    for n in names:
        found = naming.module_of_name(n)
        if found:
            get(*found).before_optimizations = folder / n
            known[found[0]] = found[1]
    for n in names:
        split = naming.split_prefix(n)
        if not split or naming.module_of_name(n):
            continue
        mid, rest = split
        name = known.get(mid)
        if name is None:
            # a module without before_optimizations: best guess at its name
            name = naming.guess_module_name(n)
            if name is None:
                continue
            known[mid] = name
        if not rest.startswith(name + "."):
            continue
        tail = rest[len(name) + 1:]
        mf = get(mid, name)
        mf.tails.append(tail)
        path = folder / n
        f = naming.parse_file_name(tail)
        if f.kind == "snapshot":
            mf.snapshot_paths.append((f.step, f.stage, path))
        elif f.kind == "optimized":
            mf.optimized = path
        elif f.kind == "buffer-assignment":
            mf.buffer_assignment = path
        elif f.kind == "memory-usage-report":
            mf.memory_usage_report = path
        elif f.kind == "debug_options":
            mf.debug_options = path
        else:
            mf.other.append(path)
    out = list(modules.values())
    for mf in out:
        mf.snapshot_paths.sort(key=lambda t: t[0])
        mf.backend = naming.backend_of_names(mf.name, mf.tails)
    out.sort(key=lambda m: (int(m.id), m.name))
    return out


# ---- a dump: ordered snapshots of one module ------------------------------------------------

class Dump:
    """One compiled module's dump: pass snapshots in execution order, the module before and
    after optimization, its buffer assignment and memory-usage report.

    Made by ``DumpSession`` (then ``compiled``, ``params`` and ``options`` are known) or read
    from any folder with ``Dump.from_folder``.  The ``dump`` and ``unfused`` fixtures return
    one; docs/api.md lists every attribute, with examples the test suite runs.

    Example::

        d = dump(softmax, x)                 # in a claim; DumpSession(folder).dump elsewhere
        len(d.fusion_kernels)                # the optimized program's fusion kernels, counted
        d.traffic                            # bytes its kernels read plus write (an int)
        d.optimized.entry.instructions       # the optimized program (hlo.HloModule)
        d.snapshots[0].module                # the program after the first pass
        d.compiled.cost_analysis()           # jax's compiled executable
        d.fusion_decisions()                 # the fusion pass's own log (fusion.FusionDecision)
    """

    def __init__(self, files: ModuleFiles, *, compiled=None, params=None, options=None,
                 function: str | None = None) -> None:
        self.files = files
        self.folder = files.folder
        self.name = files.name
        self.compiled = compiled
        self.params: dict[str, tuple[str, tuple]] = dict(params or {})
        self.options: dict[str, Any] = dict(options or {})
        self.function = function
        self.snapshots: list[Snapshot] = snapshots_of(files)
        self._before = self._optimized = self._traffic = None
        self._fusion_log_folder: tuple | None = None
        # set by DumpSession: the same compile, with the fusion log; (its folder, module id)
        self._recompile: Callable[[], tuple] | None = None
        # the backend its files name (naming.py); DumpSession sets the platform it compiled for
        self.backend: str | None = files.backend
        self.session: "DumpSession | None" = None  # the DumpSession that made it, if any

    @classmethod
    def from_folder(cls, folder, module: str | None = None) -> "Dump":
        """The one module of ``folder`` (or the one named ``module``)."""
        return DumpFolder(folder).dump(module)

    # -- what every dump has --------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<Dump {self.files.key}: {len(self.snapshots)} snapshots in {self.folder}>"

    def check_complete(self) -> None:
        """Raise DumpError naming the module and file when a part the analysis needs is missing:
        the module before optimizations, the optimized module, or pass snapshots (a gap in
        the step numbering, or none at all)."""
        key = self.files.key
        if self.files.before_optimizations is None:
            raise DumpError(f"{self.folder}/{key}.before_optimizations.txt is missing")
        if self.files.optimized is None:
            raise DumpError(f"{self.folder}: {key} has no *after_optimizations.txt "
                            f"(the compile did not finish, or the dump was cut short)")
        if not self.snapshots:
            raise DumpError(f"{self.folder}: {key} has no pass snapshots (dump it with "
                            f"--xla_dump_hlo_pass_re=.* to see every pass)")
        steps = [s.step for s in self.snapshots]
        expected = list(range(steps[0], steps[0] + len(steps)))
        if steps[0] != 0 or steps != expected:
            missing = sorted(set(range(0, steps[-1] + 1)) - set(steps))
            raise DumpError(f"{self.folder}: {key} is missing pass snapshot step(s) "
                            f"{', '.join(f'{s:04d}' for s in missing[:10])}"
                            + (" ..." if len(missing) > 10 else ""))

    @property
    def before_optimizations(self):
        """The module as jax handed it to XLA, parsed (hlo.HloModule)."""
        if self._before is None:
            if self.files.before_optimizations is None:
                raise DumpError(f"{self.folder}: {self.files.key} has no before_optimizations.txt")
            self._before = parse_file(self.files.before_optimizations)
        return self._before

    @property
    def optimized(self):
        """The optimized module, the program that runs, parsed (hlo.HloModule):
        ``d.optimized.entry.instructions`` in program order."""
        if self._optimized is None:
            self._optimized = parse_file(self.optimized_file())
        return self._optimized

    def optimized_file(self) -> Path:
        """The optimized module's file (``*after_optimizations.txt``)."""
        if self.files.optimized is None:
            raise DumpError(f"{self.folder}: {self.files.key} has no *after_optimizations.txt")
        return self.files.optimized

    @property
    def optimized_text(self) -> str:
        """The optimized module's HLO text, as XLA wrote it."""
        return read_text(self.optimized_file())

    @property
    def buffer_assignment(self) -> str:
        """The text of XLA's buffer assignment for the optimized module."""
        if self.files.buffer_assignment is None:
            raise DumpError(f"{self.folder}: {self.files.key} has no buffer-assignment dump")
        return read_text(self.files.buffer_assignment)

    @property
    def memory_usage_report(self) -> str:
        """The text of XLA's memory-usage report for the optimized module."""
        if self.files.memory_usage_report is None:
            raise DumpError(f"{self.folder}: {self.files.key} has no memory-usage-report dump")
        return read_text(self.files.memory_usage_report)

    @property
    def traffic(self) -> int:
        """Bytes the optimized program reads plus writes (spill-style, see traffic.py)."""
        return self.traffic_report.bytes_accessed

    @property
    def traffic_report(self):
        """Bytes read and written per kernel of the optimized module (traffic.ModuleTraffic):
        ``.kernels``, ``.bytes_read``, ``.bytes_written``, ``.compare_with_xla(cost)``."""
        if self._traffic is None:
            ba = self.buffer_assignment if self.files.buffer_assignment else None
            self._traffic = module_traffic(self.optimized, buffer_assignment_text=ba)
        return self._traffic

    @property
    def xla_bytes_accessed(self) -> float:
        """XLA's own count of the bytes the compiled program reads and writes: the 'bytes
        accessed' of the executable's cost analysis (HloCostAnalysis).  DumpError for a dump
        read from a folder, which has no executable."""
        if self.compiled is None:
            raise DumpError(f"{self.folder}: read from a folder, this dump has no executable to ask "
                            f"for XLA's cost analysis (a DumpSession dump has one)")
        return self.compiled.cost_analysis()["bytes accessed"]

    def passes_that_changed(self) -> list[str]:
        """Passes after which a snapshot was written (with ``.*``: those that reported a change
        of the module), in order, without repeats.  XLA's word, not a comparison of texts: a
        snapshot can equal the one before it (``passes.pass_changes`` compares them)."""
        seen: dict[str, None] = {}
        for s in self.snapshots:
            if s.after != "pipeline-start":
                seen.setdefault(s.after, None)
        return list(seen)

    def around_pass(self, pass_name: str) -> tuple:
        """The snapshots just before and just after the first run of ``pass_name`` (the
        every-pass dump writes a snapshot only when a pass changed the module, so the previous
        one is what it saw); DumpError when no snapshot was written after it."""
        for i, s in enumerate(self.snapshots):
            if s.after == pass_name and i > 0:
                return self.snapshots[i - 1], s
        raise DumpError(f"no snapshot after {pass_name!r} in {self.folder}: did the pass change nothing?")

    def passes_seen(self) -> set[str]:
        """Every pass and pipeline name any snapshot file mentions."""
        out: set[str] = set()
        for s in self.snapshots:
            out.update(x for x in (s.pipeline, s.after, s.before) if x)
        out -= {"pipeline-start", "pipeline-end"}
        return out

    def fusion_decisions(self):
        """The compiler's own fusion decisions, from XLA's fusion visualization log.

        A dump made by ``DumpSession`` without ``xla_dump_fusion_visualization=True`` (the
        default: the log renders a graph per decision and is slow on big programs) compiles
        the same program with the same options once more, with the log, into a ``fusion-log``
        sub-folder.  A dump read from a folder must already hold ``*_fusion.html`` files
        (``*_fusion.pyz`` from jaxlib 0.11 on)."""
        if self._fusion_log_folder is None:
            if fusion_log_files(self.folder, self.files.id) or self._recompile is None:
                self._fusion_log_folder = (self.folder, self.files.id)
            else:
                self._fusion_log_folder = self._recompile()
        folder, module_id = self._fusion_log_folder
        return fusion_decisions_in_folder(folder, module_id=module_id)

    # -- deterministic evidence ---------------------------------------------------------
    def write_manifest(self) -> Path:
        """Write ``dumpref-manifest.txt``: one line per deterministic dump file, its name with
        the process-dependent module number removed and the sha256 of its text with source
        locations removed.  This file is what claims hash as evidence: two compiles of the
        same program with the same options give the same manifest, in any process, in any
        checkout.  What is left out, and why, is written at its top."""
        lines = ["# pytest-dumpref manifest of an XLA dump: <sha256 of text without source "
                 "locations>  <file name without module number>",
                 "# left out: *.debug_options (holds the dump path), *_fusion.html (compressed "
                 "graphs whose bytes vary between identical compiles), *.ll and *.o (not HLO)"]
        prefix = f"module_{self.files.id}."
        backend = naming.BACKENDS.get(self.files.backend or "")
        environment = backend.environment_files if backend else ()
        if backend and environment:
            lines.append(f"# left out, as {backend.chip} writes them about the compile's environment: "
                         f"{', '.join(environment)}")
        for p in sorted(self.folder.iterdir()):
            if not p.is_file() or not p.name.startswith(prefix) or not p.name.endswith(_HASHED_SUFFIXES):
                continue
            if p.name.endswith(environment):
                continue
            digest = hashlib.sha256(strip_source_info(read_text(p)).encode()).hexdigest()
            lines.append(f"{digest}  {stable_file_name(p.name[len(prefix):])}")
        out = self.folder / MANIFEST
        out.write_text("\n".join(lines) + "\n")
        return out

    def record(self, evidence, title: str | None = None, *, note: bool = True) -> None:
        """Record the dump as evidence: its manifest (hashed), what the hash is of
        (MANIFEST_NOTE, unless ``note=False``), and the backend, parameters and options it
        was compiled with."""
        manifest = self.folder / MANIFEST
        if not manifest.exists():
            self.write_manifest()
        evidence.file(title or f"XLA dump of {self.what}", manifest)
        if note:
            evidence.note(MANIFEST_NOTE)
        evidence.observe(backend=self.backend, params=self.params, options=self.options)

    @property
    def what(self) -> str:
        """What was compiled, as an evidence title says it: the function, and the passes
        disabled (``softmax without fusion``)."""
        off = self.options.get("xla_disable_hlo_passes")
        return (self.function or "") + (f" without {off}" if off else "")

    @property
    def fusion_kernels(self) -> list:
        """The optimized program's fusion kernels: the ``fusion`` instructions of its entry
        computation (hlo.Instruction), in program order.  ``len(d.fusion_kernels)`` counts
        them; a kernel inside a while body or a called computation is not among them (see
        ``traffic_report.kernels``, which lists those with their path)."""
        return [i for i in self.optimized.entry.instructions if i.opcode == "fusion"]


# A pass name that carries a counter of the process: jaxlib 0.12 names a pass of its CPU
# pipeline apply-xla-transforms-N, N counting every such pass the process ran before, so the
# same compile is ...before_apply-xla-transforms-1 alone and -5 after another compile.
_PROCESS_COUNTED_PASS = re.compile(r"(apply-xla-transforms)-\d+(?=\.|$)")


def stable_file_name(name: str) -> str:
    """A dump file name (module number already removed) with the process's pass counters
    shown as ``-N`` (``before_apply-xla-transforms-5.txt`` -> ``before_apply-xla-transforms-N.txt``);
    names without such a counter (jaxlib 0.9 to 0.11 write none) are returned unchanged."""
    return _PROCESS_COUNTED_PASS.sub(r"\1-N", name)


def strip_source_info(text: str) -> str:
    """HLO text without metadata and the source-location sections (FileNames ... StackFrames),
    which hold absolute paths of the Python files that traced the program."""
    out, skipping = [], False
    for line in text.split("\n"):
        s = line.strip()
        if s in _SOURCE_INFO_SECTIONS:
            skipping = True
            continue
        if skipping:
            if not s:
                skipping = False
            continue
        out.append(_METADATA.sub("", line) if "metadata={" in line else line)
    return "\n".join(out)


def shown_name(path) -> str:
    """A dump file's name with the process's compile counter (``module_0038``) shown as
    ``module_NNNN``: it counts the compiles the process made before, so it changes with what
    ran earlier in the same process; the rest of the name is the same in every run."""
    return re.sub(r"^module_\d+\.", "module_NNNN.", Path(path).name)


# What the evidence hash of a dump is a hash of (Dump.record says it once per claim).
MANIFEST_NOTE = (
    "A dump is kept as evidence by its dumpref-manifest.txt (Dump.write_manifest, listed in the "
    "first claim): two comment lines, then one line per *.txt file of the module, in name order: "
    "the sha256 (hex) of the file's text, UTF-8, with metadata={...} and the source-location sections "
    "removed (strip_source_info), two spaces, and the file's name without its module_NNNN. prefix "
    "(a process counter in a pass name shown as -N). The sha256 shown for the evidence is of the "
    "manifest file itself.")


def manifest_entries(path) -> dict:
    """file name (without module number) -> sha256 of its text without metadata and source
    locations, from a dump's manifest."""
    rows = [ln.split("  ", 1) for ln in Path(path).read_text().splitlines() if ln and not ln.startswith("#")]
    return {name: digest for digest, name in rows}


def manifest_listing() -> str:
    """How a manifest is written, as it runs: Dump.write_manifest and what it calls, cut from
    this file's source."""
    from .standalone import listing
    return (listing({"dump": ["strip_source_info", "stable_file_name", "_HASHED_SUFFIXES", "read_text",
                              "MANIFEST"]}, order=("dump",))
            + "\n\n# a method of class Dump (self.folder: the dump folder; self.files.id: the NNNN of its module)\n"
            + inspect.getsource(Dump.write_manifest))


# ---- evidence recorded on a chip (pytest_dumpref/recording.py) ----------------------------

# What a claim that needs a chip keeps of each compile, live or replayed: the files its analyses
# read (the module before optimizations, the pass snapshots, the optimized module, its buffer
# assignment and memory-usage report, the compile's options, the fusion log), not the compiler's
# environment files (a TPU writes 100 KB and more of those per compile).
RECORDED_KINDS = ("before_optimizations", "snapshot", "optimized", "buffer-assignment",
                  "memory-usage-report", "debug_options")


def recorded_files(folder: Path) -> list[Path]:
    """The files of a dump folder a recording keeps (RECORDED_KINDS and the fusion log), sorted."""
    out = []
    for p in sorted(folder.iterdir()):
        if not p.is_file():
            continue
        named = naming.describe(p.name)
        if (named and named[1].kind in RECORDED_KINDS) or p.name.endswith(LOG_SUFFIXES):
            out.append(p)
    return out


class RecordedExecutable:
    """What stands in for jax's compiled executable in a replayed dump: what the executable
    said when it was recorded (its cost analysis), and nothing else."""

    def __init__(self, platform: str, extra: dict, source: str) -> None:
        self.platform = platform
        self._extra = extra
        self._source = source

    def cost_analysis(self) -> dict:
        if "cost_analysis" not in self._extra:
            raise DumpError(f"{self._source}: its cost analysis was not recorded")
        return dict(self._extra["cost_analysis"])

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise DumpError(f"a dump replayed from {self._source} has no executable: only its cost analysis "
                        f"was recorded ({name!r} is not); run the claim where jax's default backend is "
                        f"{self.platform} to have one")


@dataclass
class RecordedDumps:
    """A claim that needs ``recording.platform``: ``mode`` is "replay" (compile nothing: the
    recorded files), "record" (compile live and add each compile to ``recording``) or "live"
    (compile live, record nothing)."""
    mode: str
    recording: Any

    def key(self, jfn, traced_args, options: dict) -> str:
        """recording.key_of the program as jax lowers it for the recording's platform (it can
        on any machine) and the compile options."""
        import jax
        from ..recording import key_of
        specs = [jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), a) for a in traced_args]
        lowered = jax.jit(jfn).trace(*specs).lower(lowering_platforms=(self.recording.platform,))
        return key_of(self.recording.platform, lowered.as_text(), options)


# ---- compiling with dumps -----------------------------------------------------------------

_STATIC_TYPES = (int, bool, str, type(None))


class DumpSession:
    """Compiles functions with per-compile XLA dump options, each into a fresh sub-folder of
    ``root``, and records what it did into ``evidence`` (a claims.Evidence).  With
    ``recorded`` (a claim that needs a chip), each compile is replayed from, or recorded into,
    that claim's recording."""

    def __init__(self, root: Path, evidence=None, recorded: "RecordedDumps | None" = None) -> None:
        self.root = Path(root)
        self.evidence = evidence
        self.recorded = recorded
        self._count = 0
        self.made: dict[str, Dump] = {}          # folder name -> the dump returned for it

    # -- public ---------------------------------------------------------------------------
    def dump(self, fn: Callable, *args, passes: str = ".*", **compiler_options) -> Dump:
        """Compile ``fn(*args)`` with a dump after every pass matching ``passes``.

        Python ints, bools, strings and None among ``args`` are static (baked into the
        program, as ``static_argnums`` would), since they usually are sizes such as a head
        count; arrays and pytrees of arrays are the program's parameters.
        """
        d = self._compile(fn, args, passes, compiler_options, tag="")
        self._record(d)
        return d

    def unfused(self, fn: Callable, *args, passes: Iterable[str], pass_re: str = ".*",
                **compiler_options) -> Dump:
        """Compile ``fn(*args)`` with the named passes disabled (``xla_disable_hlo_passes``).

        XLA accepts unknown pass names silently, so this first compiles the default program
        with a dump of every pass that ran, and raises DumpError when a named pass never ran
        or when disabling the passes left the optimized module as it was.
        """
        if isinstance(passes, str):
            passes = [p for p in passes.split(",") if p.strip()]
        passes = [p.strip() for p in passes]
        if not passes:
            raise DumpError("unfused: name at least one pass to disable (passes=[...])")
        user_disabled = compiler_options.pop("xla_disable_hlo_passes", "")
        reference = self._compile(fn, args, ".", compiler_options, tag="-reference")
        _check_passes_ran(reference, passes, _fn_name(fn))
        disabled = ",".join([p for p in user_disabled.split(",") if p] + passes)
        d = self._compile(fn, args, pass_re, dict(compiler_options, xla_disable_hlo_passes=disabled),
                          tag="-unfused")
        if _canonical_module(d.optimized_text) == _canonical_module(reference.optimized_text):
            raise DumpError(f"disabling {', '.join(passes)} left the optimized module of "
                            f"{_fn_name(fn)} unchanged ({d.optimized_file().name})")
        self._record(d)
        return d

    # -- internals ------------------------------------------------------------------------
    def _compile(self, fn, args, pass_re, compiler_options, tag) -> Dump:
        self._count += 1
        name = _fn_name(fn)
        folder = self.root / f"{self._count:02d}-{_safe(name)}{tag}"
        folder.mkdir(parents=True, exist_ok=False)
        jfn, traced_args, params = _bind(fn, args)
        runner = _runner_files(fn)
        options = {"xla_dump_hlo_pass_re": pass_re, **compiler_options}
        # Not xla_dump_fusion_visualization by default: it renders a graph per fusion
        # decision and made a 1-layer transformer training step compile in 33 s instead
        # of 0.8 s.  fusion.fusion_decisions() asks for it.
        full = {"xla_dump_to": str(folder), "xla_dump_hlo_as_text": True, **options}
        compiled = self._compile_into(folder, jfn, traced_args, full, runner, f"{name} with {options}")
        dump_folder = DumpFolder(folder)
        if len(dump_folder.modules) != 1:
            raise DumpError(f"{folder}: expected one module from compiling {name}, found "
                            f"{', '.join(m.key for m in dump_folder.modules)}")
        d = Dump(dump_folder.modules[0], compiled=compiled, params=params, options=options,
                 function=name)
        d.backend = compiled.platform if isinstance(compiled, RecordedExecutable) else _platform(compiled)
        d.session = self

        def with_fusion_log():
            sub = folder / "fusion-log"
            sub.mkdir()
            opts = dict(full, xla_dump_to=str(sub), xla_dump_fusion_visualization=True,
                        xla_dump_hlo_pass_re="^$")
            self._compile_into(sub, jfn, traced_args, opts, runner, f"{name} with {options}, its fusion log")
            (mod,) = DumpFolder(sub).modules
            return sub, mod.id
        d._recompile = with_fusion_log
        return d

    def _compile_into(self, folder: Path, jfn, traced_args, full: dict, runner, what: str):
        """Compile ``jfn`` with the dump options ``full`` into ``folder``: live, or from the
        claim's recording (``self.recorded``: its files written into ``folder``, a
        RecordedExecutable returned in place of jax's)."""
        import jax  # here, not at the top: reading a dump folder needs no jax, compiling does
        rec = self.recorded
        key = rec.key(jfn, traced_args, full) if rec is not None else ""
        if rec is not None and rec.mode == "replay":
            from ..recording import RecordingError
            try:
                n, entry = rec.recording.entry(key, what)
            except RecordingError as e:
                raise DumpError(str(e)) from None
            rec.recording.extract(n, entry, folder)
            return RecordedExecutable(rec.recording.platform, entry.extra, str(rec.recording.path))
        try:
            with xla_private.frames_left_out_of_source_locations(runner):
                lowered = jax.jit(jfn).lower(*traced_args)
            compiled = lowered.compile(compiler_options=full)
        except Exception as e:  # jax raises several types; the message is what matters
            raise DumpError(f"compiling {what} failed: {e}") from e
        if rec is not None:
            # a claim that needs a chip reads, live or replayed, the same files: the recorded ones
            kept = recorded_files(folder)
            for p in folder.iterdir():
                if p.is_file() and p not in kept:
                    p.unlink()
            if rec.mode == "record":
                cost = compiled.cost_analysis()
                cost = cost[0] if isinstance(cost, list) else cost
                rec.recording.add(key, what, kept, {"cost_analysis": {k: float(v) for k, v in (cost or {}).items()}})
        return compiled

    def _record(self, d: Dump) -> None:
        d.write_manifest()
        self.made[d.folder.name] = d
        if self.evidence is not None:
            d.record(self.evidence, note=False)
            if self.recorded is not None and self.recorded.mode == "replay":
                # the chip is the recording's, not this machine's
                self.evidence.observe(chip=self.recorded.recording.chip)

    def folder_rows(self) -> list[dict]:
        """Which sub-folder of the root holds which compile, read from the folders themselves
        (in compile order): each dump returned, each control compile of ``unfused`` (checked
        to be the default program), each fusion log, and a row on the names.  DumpError for a
        folder this session did not make."""
        default = next((d for d in self.made.values() if not d.options.get("xla_disable_hlo_passes")), None)
        rows = []
        for sub in sorted(p for p in self.root.iterdir() if p.is_dir()):
            d = self.made.get(sub.name)
            if d is not None:
                off = d.options.get("xla_disable_hlo_passes")
                rows.append({"folder": sub.name,
                             "what was compiled": f"{d.function} with xla_disable_hlo_passes={off}" if off
                             else f"{d.function}, default options",
                             "evidence title": f"XLA dump of {d.what}"})
            elif sub.name.endswith("-reference"):
                ref = Dump.from_folder(sub)
                if default is not None and (strip_source_info(ref.optimized_text)
                                            != strip_source_info(default.optimized_text)):
                    raise DumpError(f"{sub}: the reference compile's optimized module is not the default program's")
                rows.append({"folder": sub.name, "evidence title": "(none: not evidence)",
                             "what was compiled": REFERENCE_NOTE.format(fn=ref.function or _folder_function(sub))})
            else:
                raise DumpError(f"{sub}: a dump folder this session did not make")
            if (sub / "fusion-log").is_dir():
                rows.append({"folder": f"{sub.name}/fusion-log", "what was compiled": FUSION_LOG_NOTE,
                             "evidence title": "(none: read for the decision log)"})
        rows.append({"folder": "(the names)", "what was compiled": FOLDERS_NOTE.format(root=self.root.name),
                     "evidence title": ""})
        return [{k: r[k] for k in ("folder", "what was compiled", "evidence title")} for r in rows]

    def record_folders(self, evidence) -> None:
        """Record ``folder_rows`` as a folded table of the claim's evidence."""
        evidence.table(f"the dump folders of this claim, under {self.root.name}/, in compile order",
                       self.folder_rows(), fold=True)


FOLDERS_NOTE = (
    "Each compile a claim makes gets a sub-folder of the test's {root}/ folder, numbered in "
    "compile order (the file lines above give the full path under pytest's --basetemp). Dump file "
    "names begin module_NNNN, the compile counter of the process (a claim run alone starts at "
    "module_0000), so the excerpt titles show it as NNNN.")
REFERENCE_NOTE = (
    "{fn}, default options, a snapshot after every pass that ran, changed or not "
    "(xla_dump_hlo_pass_re=., where .* dumps only the passes that changed something): the unfused "
    "fixture's control (DumpSession.unfused in pytest_dumpref/xla/dump.py), compiled just before "
    "the unfused variant. It serves two checks: each pass named for disabling must appear in it, "
    "since XLA accepts unknown names in xla_disable_hlo_passes silently; and the unfused optimized "
    "module must differ from its optimized module, which is the default program's (asserted).")
FUSION_LOG_NOTE = (
    "the same compile once more with xla_dump_fusion_visualization (and no pass snapshots); its "
    "*_fusion.html files carry the fusion pass's decision log (Dump.fusion_decisions), the "
    "compiler's column of the decision table")


def _folder_function(folder: Path) -> str:
    """The function a DumpSession folder (``NN-<function><tag>``) was compiled from."""
    return re.sub(r"^\d+-|-(reference|unfused)$", "", folder.name)


def _runner_files(fn) -> list[str]:
    """The Python files of the frames above the code that asked for this compile: the test
    runner's (pytest and pluggy; under ``pytest -n`` also xdist's and execnet's), an
    interpreter's start-up, a notebook kernel's.  jax writes the whole Python stack into the
    program's source locations (the StackFrames table, and ``stack_frame_id=`` in each
    instruction's metadata), so without leaving these out the same program, compiled by the
    same claim, numbers its frames differently under ``pytest -n 2`` (more frames above the
    test) than in a serial run.  Files the caller's own frame or ``fn`` live in are kept."""
    here = _THIS_FILE
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_code.co_filename == here:
        f = f.f_back
    if f is None:
        return []
    keep = {f.f_code.co_filename, getattr(getattr(fn, "__code__", None), "co_filename", None)}
    out: list[str] = []
    f = f.f_back
    while f is not None:
        name = f.f_code.co_filename
        if name not in keep and name not in out:
            out.append(name)
        f = f.f_back
    return out


_THIS_FILE = _runner_files.__code__.co_filename


def _check_passes_ran(reference: Dump, passes: list[str], fn_name: str) -> None:
    """Each named pass must appear in the every-pass dump of the default compile.  (Whether it
    changed anything there is not asked: fusion-wrapper, for one, only has work once fusion
    is disabled.  The caller checks that disabling the set changed the optimized module.)"""
    seen = reference.passes_seen()
    for p in passes:
        fname = p.replace(" ", "_")  # XLA writes spaces in pass names as '_'
        if fname not in seen:
            close = difflib.get_close_matches(fname, sorted(seen), n=3)
            backend = naming.BACKENDS.get(reference.backend or "")
            if backend and not close and any(p in b.fusion_passes for b in naming.BACKENDS.values()):
                close = [f for f in backend.fusion_passes if f in seen]
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            if backend:
                hint += f" (compiled for {backend.chip}, whose fusion passes are {', '.join(backend.fusion_passes)})"
            raise DumpError(f"pass {p!r} never ran when compiling {fn_name} (XLA ignores "
                            f"unknown names in xla_disable_hlo_passes){hint}")


def _canonical_module(text: str) -> str:
    return strip_source_info(text)


def _fn_name(fn) -> str:
    while hasattr(fn, "func"):  # functools.partial
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "fn"


def _is_static(a) -> bool:
    return isinstance(a, _STATIC_TYPES)


def _bind(fn, args):
    """Split ``args`` into static values (closed over) and traced ones, and name every array
    leaf by its Python argument name and pytree path (``params['wq']``)."""
    import jax  # only a compile binds arguments (see _compile)
    import numpy as np
    try:
        bound = inspect.signature(fn).bind_partial(*args)
        arg_names = list(bound.arguments)
        # *args collect into one name; expand them positionally
        names = []
        for n in arg_names:
            v = bound.arguments[n]
            kind = inspect.signature(fn).parameters[n].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                names.extend(f"{n}[{i}]" for i in range(len(v)))
            else:
                names.append(n)
    except (TypeError, ValueError):
        names = []
    if len(names) != len(args):
        names = [f"arg{i}" for i in range(len(args))]

    static = {i: a for i, a in enumerate(args) if _is_static(a)}
    traced_idx = [i for i in range(len(args)) if i not in static]

    def jfn(*traced):
        full = list(args)
        for i, t in zip(traced_idx, traced):
            full[i] = t
        return fn(*full)

    jfn.__name__ = _fn_name(fn)
    jfn.__qualname__ = jfn.__name__
    # jax names the HLO parameters after the signature (x, params['wq'], ...): give the
    # wrapper the traced arguments' own names, not "traced[0]".
    if len(set(names)) == len(names):
        jfn.__signature__ = inspect.Signature(
            [inspect.Parameter(re.sub(r"\W", "_", names[i]), inspect.Parameter.POSITIONAL_ONLY)
             for i in traced_idx])
    params: dict[str, tuple[str, tuple]] = {}
    for i in traced_idx:
        leaves, _ = jax.tree_util.tree_flatten_with_path(args[i])
        for path, leaf in leaves:
            dtype = getattr(leaf, "dtype", None)
            if dtype is None:
                dtype = np.asarray(leaf).dtype
            shape = tuple(int(x) for x in getattr(leaf, "shape", np.shape(leaf)))
            params[names[i] + jax.tree_util.keystr(path)] = (np.dtype(dtype).name, shape)
    return jfn, [args[i] for i in traced_idx], params


def _platform(compiled) -> str:
    try:
        return next(iter(compiled.input_shardings[0][0].device_set)).platform
    except Exception:
        import jax  # only a compile asks (see _compile)
        return jax.default_backend()
