"""How each XLA backend names its dump files: one table, a row per backend, read by every
reader of a dump folder (dump.py, cost_cli.py, kernel_code.py, calibrate.py).

File names XLA writes with ``--xla_dump_to`` (one module = one ``module_NNNN.<name>`` prefix)::

    CPU  module_0004.jit_softmax.before_optimizations.txt
         module_0004.jit_softmax.0017.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt
         module_0004.jit_softmax.cpu_after_optimizations.txt      (and -buffer-assignment.txt, ...)
    TPU  module_0170.jit_softmax.cl_933746096.before_optimizations.txt
         module_0170.jit_softmax.cl_933746096.0032.Main_fusion.after_tpu_fusion.before_pipeline-end.txt
         module_0170.jit_softmax.cl_933746096.0020.tpu-tiling-rewriter.before_tiling_rewriter.txt
         module_0170.jit_softmax.cl_933746096.after_optimizations.txt
         module_0170.jit_softmax.cl_933746096.tpu_comp_env.txt
    GPU  module_0004.jit_softmax.sm_9.0_gpu_after_optimizations.txt  (ROCm: gfx942_gpu_...)

The four-digit step counts snapshots per module, so it orders them in execution order.  A
snapshot's stage is ``<pipeline>.after_<pass>.before_<pass>`` between two passes of a pipeline;
inside one pass that dumps its own stages (copy-insertion on every backend, the TPU's
tpu-tiling-rewriter) it is ``<pass>.after_<stage>`` or ``<pass>.before_<stage>``.

The backend is read from the dump, never assumed: from a folder's file names (``backend_of_names``)
or from an optimized module's text (``backend_of_module_text``: only a TPU tiles its layouts,
``{1,0:T(8,128)}``).  An analysis made for one backend refuses another's module by name
(``require_backend``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BACKENDS", "Backend", "BackendMismatch", "FileName", "Stage", "backend_of_module_text",
           "backend_of_names", "parse_file_name", "parse_stage", "require_backend"]


@dataclass(frozen=True)
class Backend:
    """One row of the table: how a backend names its dump files and passes.

    ``optimized_prefix``: what stands before ``after_optimizations`` in the optimized module's
    file name (a regular expression); ``module_suffix``: what the backend appends to the module's
    name (the TPU's ``.cl_<id>``); ``marker_files``: file name tails only this backend writes;
    ``fusion_passes``: the passes that fuse, as its pipeline names them (what ``unfused`` takes);
    ``chip``: how the write-up names what it compiles for; ``optimized_glob``: a glob of its
    optimized modules' file names; ``environment_files``: file name tails of what the backend
    writes about the compile's environment, not about the program (left out of a dump's
    manifest: some differ between two identical compiles)."""
    name: str
    chip: str
    optimized_prefix: str
    module_suffix: str | None
    marker_files: tuple
    fusion_passes: tuple
    optimized_glob: str
    environment_files: tuple = ()


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("cpu", "XLA:CPU", r"cpu_", None, (), ("fusion",), "*.cpu_after_optimizations.txt"),
    # libtpu writes no platform word before after_optimizations; its module names end in the
    # compilation's id (.cl_NNN) and it writes tpu_comp_env.txt beside them
    Backend("tpu", "TPU", r"", r"\.cl_\d+", ("tpu_comp_env.txt",), ("tpu_fusion",),
            "*.cl_*.after_optimizations.txt",
            # hlo_module_config.txt differs between two compiles of one program in one process
            ("tpu_comp_env.txt", "hlo_module_config.txt", "target_arguments.txt", "execution_options.txt",
             "basic_compiler_metadata.txt", "transfer_stats.txt", "flagfile")),
    # XLA:GPU prefixes the compute capability (CUDA) or the gfx name (ROCm)
    Backend("gpu", "XLA:GPU", r"(?:sm_\d+\.\d+|gfx[0-9a-z]+)_gpu_", None, (),
            ("priority-fusion", "fusion", "multi_output_fusion", "horizontal-loop-fusion"),
            "*_gpu_after_optimizations.txt"),
)}

_PREFIX = re.compile(r"^module_(?P<id>\d+)\.(?P<rest>.+)$")
_BEFORE_OPT = re.compile(r"^module_(?P<id>\d+)\.(?P<name>.+)\.before_optimizations\.txt$")
_STEP = re.compile(r"^(?P<step>\d{4,})\.(?P<stage>.+)\.txt$")
_OPTIMIZED = re.compile(r"^(?P<platform>(?:.*_)?)after_optimizations(?P<kind>-[a-z-]+)?\.txt$")
_BETWEEN = re.compile(r"^(?P<pipeline>.+?)\.after_(?P<after>.+?)(?:\.before_(?P<before>.+))?$")
_INSIDE_BEFORE = re.compile(r"^(?P<pipeline>.+?)\.before_(?P<before>.+)$")
_TILED = re.compile(r"\{[0-9,]*:[^{}]*T\(\d")


@dataclass(frozen=True)
class Stage:
    """Where in the pipeline a snapshot was written: ``after`` the pass (or stage) that just ran
    (``pipeline-start`` where nothing of the pipeline or pass has run yet), ``before`` the one
    about to run (None for a stage a pass dumps from inside itself)."""
    pipeline: str
    after: str
    before: str | None


def parse_stage(text: str, previous: Stage | None = None) -> Stage:
    """``<pipeline>.after_<pass>[.before_<pass>]`` or ``<pass>.before_<stage>`` -> Stage;
    ValueError for anything else.

    A ``<pass>.before_<stage>`` snapshot (the TPU's ``tpu-tiling-rewriter.before_tiling_rewriter``,
    written from inside layout-assignment) names no pass that just ran: what changed since the
    ``previous`` snapshot is the work of the pass that snapshot was written before
    (``Layout_assignment.after_pipeline-start.before_layout-assignment``: layout-assignment), so
    that pass is its ``after``; with no previous snapshot, ``pipeline-start``."""
    m = _BETWEEN.match(text)
    if m:
        return Stage(m["pipeline"], m["after"], m["before"])
    m = _INSIDE_BEFORE.match(text)
    if m:
        ran = previous.before if previous is not None and previous.before not in (None, "pipeline-end") else None
        return Stage(m["pipeline"], ran or "pipeline-start", m["before"])
    raise ValueError(text)


@dataclass(frozen=True)
class FileName:
    """What a dump file's name says, once its module's name is known: ``kind`` is one of
    ``before_optimizations``, ``snapshot`` (with ``step`` and ``stage``), ``optimized``,
    ``buffer-assignment``, ``memory-usage-report``, ``debug_options``, ``other``; ``platform`` is the word before
    ``after_optimizations`` (``cpu_``, ``sm_9.0_gpu_``, or empty on a TPU)."""
    kind: str
    step: int | None = None
    stage: str | None = None
    platform: str | None = None


def module_of_name(name: str) -> tuple[str, str] | None:
    """(module id, module name) of a ``before_optimizations`` file, else None."""
    m = _BEFORE_OPT.match(name)
    return (m["id"], m["name"]) if m else None


def split_prefix(name: str) -> tuple[str, str] | None:
    """(module id, the rest) of any ``module_NNNN.<rest>`` file name, else None."""
    m = _PREFIX.match(name)
    return (m["id"], m["rest"]) if m else None


def guess_module_name(name: str) -> str | None:
    """The module name of a file whose module has no ``before_optimizations`` file: what
    stands before the step or before the optimized module's tail."""
    m = re.match(r"^module_\d+\.(?P<name>.+?)\.\d{4,}\..+\.txt$", name) or \
        re.match(r"^module_\d+\.(?P<name>.+)\.(?:[^.]*_)?after_optimizations(?:-[a-z-]+)?\.txt$", name)
    return m["name"] if m else None


def describe(name: str) -> tuple[str, FileName] | None:
    """(``module_NNNN.<module>``, what the rest says) of a dump file's name read alone, without
    its folder (the module's name is what stands before the step, before
    ``before_optimizations``, or before the optimized module's tail); None for a name that is
    not a module's file."""
    if not _PREFIX.match(name):
        return None
    found = module_of_name(name)
    module = found[1] if found else guess_module_name(name)
    if module is None:
        return None
    key = name[:name.index(".") + 1] + module
    return key, parse_file_name(name[len(key) + 1:])


def parse_file_name(tail: str) -> FileName:
    """What the part of a file name after ``module_NNNN.<module>.`` says."""
    if tail == "before_optimizations.txt":
        return FileName("before_optimizations")
    if tail == "debug_options":        # the compile's DebugOptions, as text (any backend)
        return FileName("debug_options")
    m = _STEP.match(tail)
    if m:
        return FileName("snapshot", int(m["step"]), m["stage"])
    m = _OPTIMIZED.match(tail)
    if m:
        kind = {None: "optimized", "-buffer-assignment": "buffer-assignment",
                "-memory-usage-report": "memory-usage-report"}.get(m["kind"], "other")
        return FileName(kind, platform=m["platform"])
    return FileName("other")


def backend_of_names(module_name: str, tails: list[str]) -> str | None:
    """The backend a module's files come from, by the table: its name's suffix, a marker file,
    or the platform word of its optimized module; None when they do not say (a folder with
    before_optimizations and snapshots only)."""
    for b in BACKENDS.values():
        if b.module_suffix and re.search(b.module_suffix + "$", module_name):
            return b.name
        if any(t.endswith(m) for t in tails for m in b.marker_files):
            return b.name
    for t in tails:
        f = parse_file_name(t)
        if f.kind in ("optimized", "buffer-assignment", "memory-usage-report") and f.platform is not None:
            for b in BACKENDS.values():
                if b.optimized_prefix and re.fullmatch(b.optimized_prefix, f.platform):
                    return b.name
    return None


def backend_of_module_text(text: str) -> str | None:
    """"tpu" for an optimized module whose layouts are tiled (``f32[8,128]{1,0:T(8,128)}``:
    only the TPU compiler writes tiles into HLO layouts), else None: an untiled module does not
    say whether XLA:CPU or XLA:GPU made it."""
    return "tpu" if _TILED.search(text) else None


class BackendMismatch(ValueError):
    """A module from one backend handed to an analysis made for another."""


def require_backend(path, text: str, want: str, analysis: str, *, folder_backend: str | None = None) -> None:
    """Refuse, by name, a module ``analysis`` (made for backend ``want``) cannot price: one whose
    dump or text says it comes from another backend."""
    found = folder_backend or backend_of_module_text(text)
    if found is not None and found != want:
        raise BackendMismatch(
            f"{path}: a module compiled for {BACKENDS[found].chip} ({_why(found, path)}); "
            f"{analysis} is made for {BACKENDS[want].chip} modules only and does not guess")


def _why(backend: str, path) -> str:
    if backend == "tpu":
        return "its layouts are tiled, as only the TPU compiler writes them"
    return f"its file name {Path(str(path)).name} says so"
