"""Command line of the kernel cost model: ``python -m pytest_dumpref calibrate [--out FILE]`` and
``python -m pytest_dumpref cost PATH... [--rates FILE] [--json]``.

``calibrate`` measures this machine's rates (``calibrate.py``) and saves them; ``cost`` prices
the optimized modules XLA:CPU dumps (``XLA_FLAGS=--xla_dump_to=DIR`` is enough: the module,
its ``-buffer-assignment.txt`` and each kernel's optimized LLVM IR or object file, which
``kernel_code.py`` reads) with ``cost_model.py``.  A
PATH is an optimized module or a dump folder (each ``*.cpu_after_optimizations.txt`` in it).
Each error is one line on stderr naming the file (with ``--json``, one JSON object with
"error" on stdout instead), and the exit code is then 2, never a traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import EXIT_BAD_INPUT
from . import calibrate as cal
from . import cost_model, kernel_code
from ..dump import DumpError, DumpFolder
from ..naming import BACKENDS, describe

DEFAULT_RATES = "dumpref-rates.json"
OPTIMIZED = BACKENDS["cpu"].optimized_glob
CPU_SUFFIX = OPTIMIZED[1:]
# What the predicted times are: timing.py's method, which calibrate's rates are measured with.
METHOD = ("time per call as pytest_dumpref/timing.py measures it: pinned to one core, single-threaded "
          "XLA (--xla_cpu_multi_thread_eigen=false), not plain multi-threaded jax's")



def register_cli(subparsers) -> None:
    """The ``calibrate`` and ``cost`` subcommands (``xla/cli.py`` registers them)."""
    p = subparsers.add_parser(
        "calibrate", help="measure this machine's rates for the kernel cost model (about 10-30 s)",
        description="Times the cost model's micro-kernels in pytest_dumpref.timing's pinned, "
                    "single-threaded, interleaved worker and saves the rates as JSON.")
    p.add_argument("--out", default=DEFAULT_RATES, metavar="FILE",
                   help=f"where to write the rates (default: {DEFAULT_RATES})")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default: 10)")
    p.set_defaults(run=run_calibrate)
    p = subparsers.add_parser(
        "cost", help="predicted time of each kernel of optimized HLO modules",
        description="Each kernel's predicted time, its regime (the memory level or the operation "
                    "class that bounds it) and the program's total, at the rates of --rates: the "
                    f"{METHOD}. Dump the modules with XLA_FLAGS=--xla_dump_to=DIR (nothing else "
                    "needed). A kernel the model has no rate for is named and the file fails (exit 2).")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a dump folder (each *.cpu_after_optimizations.txt in it, sorted) or such "
                        "files; the '-buffer-assignment.txt' and the kernels' *.ir-with-opt.ll beside "
                        "each are read when present")
    p.add_argument("--rates", metavar="FILE",
                   help=f"rates from 'calibrate' (default: {DEFAULT_RATES} if it exists, else "
                        "calibrate now)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line and file (a file that fails: 'file' and 'error')")
    p.set_defaults(run=run_cost)


def _dispatch_line(rates) -> str:
    return (f"dispatch: {rates.dispatch_inline_s * 1e6:.1f} us inline (a program under "
            f"{cost_model.ASYNC_MIN_OPS:,} flops: PJRT's CPU client runs it on the calling thread), "
            f"{rates.dispatch_async_s * 1e6:.1f} us on the worker thread (more flops: a thread switch); "
            f"launch {rates.launch_s * 1e6:.2f} us a kernel; page fault {rates.fault_s * 1e6:.2f} us")


def _print_rates(rates, seconds: float) -> None:
    print(f"calibrated in {seconds:.1f} s on {rates.machine.get('cpu', '?')} "
          f"(load average {', '.join(f'{x:.2f}' for x in rates.machine.get('load average', []))})")
    print(_dispatch_line(rates))
    print("memory, by reuse distance: " + ", ".join(
        f"{d / 2 ** 20:.3g} MiB {c * 1e12:.1f} ps/B" for d, c in rates.curve))
    print("memory moved in runs shorter than a page, against the stream at the same distance: " + ", ".join(
        f"{d / 2 ** 20:.3g} MiB {x:.2f}x" for d, x in rates.short_run))
    print(f"the memory's age: the machine's other tenants take {rates.age_bytes_per_s / 2 ** 30:.2f} GiB "
          "of the shared cache a second (memory last touched t seconds ago is priced that much further away)")
    print("compute: " + ", ".join(f"{k} {v * 1e12:.2f} ps" for k, v in rates.compute.items())
          + " (per element; dot and convolution per flop)")
    for cls, why in rates.unmeasured.items():
        print(f"not measured: {cls}: {why}")
    for row in rates.checks:
        print(f"  check {row['kernel']:<12} measured {row['measured us']:9.1f} us, predicted "
              f"{row['predicted us']:9.1f} us ({row['measured/predicted']:.3f})")


def _calibrate(**options):
    """calibrate.calibrate's (rates, result, seconds), or None after saying on stderr why it failed."""
    from ...timing import TimingError
    try:
        return cal.calibrate(**options)
    except TimingError as e:
        print(f"error: calibration failed: {e}", file=sys.stderr)
        return None


def run_calibrate(args) -> int:
    calibrated = _calibrate(rounds=args.rounds)
    if calibrated is None:
        return EXIT_BAD_INPUT
    rates, _, seconds = calibrated
    cal.save(rates, args.out)
    _print_rates(rates, seconds)
    print(f"rates written to {args.out}")
    return 0


class _Refused(ValueError):
    """A PATH that ``cost`` does not price, with why (the message names it)."""


def _instead(candidate: Path) -> str:
    """What to give instead of a file of a module: its optimized module ``candidate``."""
    if candidate.is_file():
        return f"give its optimized module instead: {candidate}"
    return f"give its optimized module ({candidate.name}) or the dump folder instead"


def _check_optimized(path: Path) -> None:
    """Refuse, naming ``path``, a file that is not an optimized module as XLA:CPU runs it:
    the module before optimizations, a snapshot after some pass, the files XLA writes beside
    the optimized module, XLA:GPU's, or (whatever the name) an unscheduled module."""
    folder = path.parent
    named = describe(path.name)      # how XLA names the files of a module: naming.py
    if named is not None:
        key, what = named
        optimized = folder / (key + CPU_SUFFIX)
        if what.kind == "before_optimizations":
            raise _Refused(f"{path}: the module before XLA's optimizations: not the kernels XLA:CPU runs "
                           f"(no fusion, no buffer assignment); {_instead(optimized)}")
        if what.kind == "snapshot":
            raise _Refused(f"{path}: a snapshot of the module after one of XLA's passes (step {what.step:04d}), "
                           f"not the optimized module XLA:CPU runs; {_instead(optimized)}")
        if what.kind in ("buffer-assignment", "memory-usage-report") or (
                what.kind == "other" and "after_optimizations" in path.name):
            side = path.name[path.name.index("after_optimizations") + len("after_optimizations") + 1:-len(".txt")]
            raise _Refused(f"{path}: not a module but the '{side}' XLA writes beside one; "
                           f"{_instead(folder / (path.name[:path.name.index('after_optimizations')] + 'after_optimizations.txt'))}")
        if what.kind == "optimized" and what.platform and what.platform.endswith("gpu_"):
            raise _Refused(f"{path}: XLA:GPU's optimized module: the model prices XLA:CPU's kernels at this "
                           "machine's rates; give a dump of a compile for the CPU")
    try:
        with path.open(encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return                                  # the read proper says why
    # the header's entry layout is tiled on a TPU: refused before any rate is measured
    cost_model.require_xla_cpu(path, first)
    if first.startswith("HloModule ") and "is_scheduled=true" not in first:
        raise _Refused(f"{path}: an unscheduled HLO module, not the optimized module XLA:CPU runs "
                       "(before its optimizations or after an early pass); give the "
                       "'*.cpu_after_optimizations.txt' that XLA_FLAGS=--xla_dump_to=DIR writes")


def _files(path: Path) -> list:
    """The optimized modules ``path`` names: itself, or each of a dump folder's, sorted."""
    if not path.is_dir():
        return [path]
    found = sorted(path.glob(OPTIMIZED))
    if not found:
        try:
            backends = {m.backend for m in DumpFolder(path).modules if m.backend not in (None, "cpu")}
        except DumpError:
            backends = set()
        if backends:
            raise _Refused(f"{path}: a dump of modules compiled for "
                           f"{', '.join(BACKENDS[b].chip for b in sorted(backends))} (naming.py reads it from "
                           f"their file names); the kernel cost model prices XLA:CPU's kernels only and does not guess")
        raise _Refused(f"{path}: a folder with no '{OPTIMIZED}' (write one with XLA_FLAGS=--xla_dump_to={path} "
                       "when running a jax program on the CPU)")
    return found


def _refused_before_rates(paths) -> list | None:
    """[(path, why)] when every PATH is refused before any pricing (another backend's module,
    a file beside the optimized module, a folder without one); None when one may be priced."""
    out = []
    for given in map(Path, paths):
        try:
            files = _files(given)
        except ValueError as e:
            out.append((given, str(e)))
            continue
        for f in files:
            if not f.is_file():
                return None             # the pricing says why it cannot be read
            try:
                _check_optimized(f)
            except ValueError as e:
                out.append((f, str(e)))
                continue
            return None
    return out


def _price(f: Path, rates):
    """(prediction, buffer assignment text or None) of one optimized module file;
    raises ValueError (HloParseError, CostModelError, _Refused) or OSError."""
    _check_optimized(f)
    text, ba_text = cal.read_optimized(f)
    program = cost_model.analyse(text, ba_text, source=str(f), **kernel_code.facts(f))
    return cost_model.predict(program, rates), ba_text


def _dispatch_why(pred, rates) -> str:
    """Why ``cost_model.predict`` charged ``pred`` the dispatch it did (cost_model's docstring:
    PJRT's CPU client runs a call on the calling thread below ``ASYNC_MIN_OPS`` flops, on its
    worker thread from there on)."""
    limit = cost_model.ASYNC_MIN_OPS
    if pred.dispatch == cost_model.WORKER:
        return (f"{pred.flops:,.0f} flops, at least {limit:,}: PJRT's CPU client hands the call to "
                f"its worker thread (inline would be {rates.dispatch_inline_s * 1e6:.1f} us)")
    return (f"{pred.flops:,.0f} flops (transcendentals not counted), under {limit:,}: PJRT's CPU client "
            f"runs the call on the calling thread (on its worker thread: {rates.dispatch_async_s * 1e6:.1f} us)")


def _print_prediction(f: Path, pred, ba_text, rates) -> None:
    print(f"{f}: {pred.module}, {len(pred.kernels)} kernels"
          + ("" if ba_text is not None else " (no buffer assignment: one buffer per instruction)"))
    print(f"  {'kernel':<36} {'kind':<8} {'us':>9} {'memory':>9} {'compute':>9}  regime")
    for k in pred.kernels:
        print(f"  {k.name:<36} {k.kind:<8} {k.seconds * 1e6:9.1f} {k.memory_s * 1e6:9.1f} "
              f"{k.compute_s * 1e6:9.1f}  {k.regime}")
    print(f"  total {pred.total_s * 1e6:.1f} us: dispatch {pred.dispatch_s * 1e6:.1f} us ({pred.dispatch}) and the "
          "kernels, the first one's launch inside the dispatch")
    print(f"  dispatch {pred.dispatch}: {_dispatch_why(pred, rates)}")


def _load_rates(args):
    """(rates, where they came from), or None after saying why on stderr."""
    path = args.rates or (DEFAULT_RATES if Path(DEFAULT_RATES).is_file() else None)
    if path:
        try:
            return cost_model.Rates.load(path), path
        except (OSError, ValueError, TypeError, KeyError) as e:
            print(f"error: {path}: not a rates file from 'calibrate' ({e})", file=sys.stderr)
            return None
    print(f"no rates file: calibrating now (save them with 'calibrate', default {DEFAULT_RATES})", file=sys.stderr)
    calibrated = _calibrate()
    return None if calibrated is None else (calibrated[0], "measured now")


def run_cost(args) -> int:
    failed = 0

    def fail(path: Path, message: str) -> None:
        nonlocal failed
        failed += 1
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        if args.json:       # the error once: in the JSON a reader of stdout parses
            print(json.dumps({"file": str(path), "error": message}))
        else:
            print(f"error: {message}", file=sys.stderr)

    refused = _refused_before_rates(args.paths)
    if refused is not None:     # nothing to price: say why without measuring rates first
        for path, message in refused:
            fail(path, message)
        return EXIT_BAD_INPUT
    loaded = _load_rates(args)
    if loaded is None:
        return EXIT_BAD_INPUT
    rates, where = loaded
    if not args.json:
        print(f"predicted {METHOD}")
        print(f"rates: {where}")

    for given in map(Path, args.paths):
        try:
            files = _files(given)
        except ValueError as e:
            fail(given, str(e))
            continue
        for f in files:
            try:
                pred, ba_text = _price(f, rates)
            except (OSError, UnicodeDecodeError) as e:
                fail(f, f"cannot read: {getattr(e, 'strerror', None) or e}")
                continue
            except ValueError as e:      # CostModelError, HloParseError and _Refused are ValueErrors
                fail(f, str(e))
                continue
            except Exception as e:  # noqa: BLE001 - no traceback reaches a user
                fail(f, f"internal error while pricing it ({type(e).__name__}: {e}); please report it with the file")
                continue
            if args.json:
                print(json.dumps(dict(pred.as_dict(), file=str(f), buffer_assignment=ba_text is not None)))
            else:
                _print_prediction(f, pred, ba_text, rates)
    return EXIT_BAD_INPUT if failed else 0
