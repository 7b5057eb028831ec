"""Command line of the xla room: ``python -m pytest_dumpref traffic FILE... [--json]``.

``register(subparsers)`` adds one subparser per command; each command is a
``_register_<name>`` function plus a ``run_<name>(args) -> exit code``, so a new command is
one more pair and one more line in ``register``.  Bad input ends in one line on stderr naming
the file, and exit code 2, never a traceback.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import EXIT_BAD_INPUT

# Each command imports the analysis it runs when it runs (no circle: they never import this
# file): `python -m pytest_dumpref` imports every room's command line just to list them.


def register(subparsers) -> None:
    _register_traffic(subparsers)
    _register_tour(subparsers)
    from .cpu.cost_cli import register_cli    # calibrate, cost: the kernel cost model
    register_cli(subparsers)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


# ---- traffic -------------------------------------------------------------------------------

def _register_traffic(subparsers) -> None:
    p = subparsers.add_parser(
        "traffic", help="bytes read and written per kernel of HLO text files",
        description="Spill-style traffic of HLO modules: each kernel of the entry "
                    "computation reads its operands and writes its result. Compared with "
                    "XLA's own HloCostAnalysis, naming the instructions where they differ. "
                    "Several files give one result each, in order; a file that cannot be "
                    "read is reported and the others still are (exit 0 only if all were).")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="HLO text files (e.g. *.cpu_after_optimizations.txt, *.hlo)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line and file (an unreadable file: 'error')")
    p.add_argument("--buffer-assignment", metavar="FILE",
                   help="buffer-assignment dump for the temporaries (default: the "
                        "'-buffer-assignment.txt' file next to each FILE, if there is one); "
                        "only with a single FILE")
    p.add_argument("--no-xla", action="store_true",
                   help="skip XLA's cost analysis (no private jaxlib API is touched)")
    p.set_defaults(run=run_traffic)


def _sibling_buffer_assignment(path: Path) -> Path | None:
    if path.suffix == ".txt":
        candidate = path.with_name(path.name[:-len(".txt")] + "-buffer-assignment.txt")
        if candidate.is_file():
            return candidate
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None


def run_traffic(args) -> int:
    from .progress import ProgressBar

    files = [Path(f) for f in args.files]
    if args.buffer_assignment and len(files) > 1:
        return _fail("--buffer-assignment names the buffer assignment of one file; with "
                     f"{len(files)} files each one's sibling '-buffer-assignment.txt' is used")
    failed = 0
    bar = ProgressBar(len(files), "traffic") if len(files) > 1 else None
    try:
        for index, path in enumerate(files):
            if bar:
                bar.step(str(path), n=0)
            try:
                result = _traffic_of(path, args)
            except ValueError as e:  # unreadable, not HLO, or refused: one line, go on
                message = str(e)
                if not message.startswith(str(path)) and not isinstance(e, _OfAnotherFile):
                    # e.g. an attribute value gone bad
                    message = f"{path}: {message}"
                result = (None, None, None, message)
            except Exception as e:  # noqa: BLE001 - no traceback reaches a user
                result = (None, None, None, f"{path}: internal error while analysing it "
                          f"({type(e).__name__}: {e}); please report it with the file")
            if bar:
                bar.step()
                bar.close()
            if result[3] is not None:
                failed += 1
                if not args.json:       # with --json the error is said once, in its JSON line
                    print(f"error: {result[3]}", file=sys.stderr)
            _report(args, index, path, *result)
    except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")
    finally:
        if bar:
            bar.close()
    return EXIT_BAD_INPUT if failed else 0


class _OfAnotherFile(ValueError):
    """An error that names the file it is about, which is not the module (its buffer assignment)."""


def _traffic_of(path: Path, args):
    """(traffic, buffer assignment path, XLA's error, None) for one file; raises ValueError
    (HloParseError included) naming the file when it cannot be analysed."""
    from .naming import BACKENDS
    from .traffic import counting_for, module_traffic, xla_float32_total

    text = _read(path)
    from .hlo import parse_module
    module = parse_module(text, source=str(path))
    ba_path = Path(args.buffer_assignment) if args.buffer_assignment else \
        _sibling_buffer_assignment(path)
    ba_text = _read(ba_path) if ba_path else None
    try:
        traffic = module_traffic(module, buffer_assignment_text=ba_text,
                                 buffer_assignment_source=str(ba_path) if ba_path else None)
    except ValueError as e:
        if ba_path and str(e).startswith(str(ba_path)):   # its own file's fault, said so
            raise _OfAnotherFile(str(e)) from None
        raise
    xla_error = None
    counting = counting_for(module)
    if counting.backend is not None:
        # XLA:CPU's cost analysis (xla_private) would count this module as the CPU counts; the
        # backend's own rules, restated in its room, give its "bytes accessed" from the text
        traffic.with_xla_cost({"bytes accessed": xla_float32_total(module)})
        traffic.xla_cost_by = f"{BACKENDS[counting.backend].chip}'s cost analysis, its rules restated " \
                              f"(pytest_dumpref/xla/{counting.backend}/counting.py)"
    elif not args.no_xla:
        from . import xla_private
        try:
            traffic.with_xla_cost(xla_private.cost_analysis(text, source=str(path)))
        except (ValueError, xla_private.XlaPrivateApiError) as e:
            xla_error = str(e)
    return traffic, ba_path, xla_error, None


def _report(args, index, path, traffic, ba_path, xla_error, error) -> None:
    if args.json:
        if error is not None:
            data = {"file": str(path), "error": error}
        else:
            data = {"file": str(path), **traffic.as_dict()}
            if ba_path:
                data["buffer_assignment"] = str(ba_path)
            if xla_error:
                data["xla_error"] = xla_error
            if traffic.xla_cost_by:
                data["xla_counted_by"] = traffic.xla_cost_by
        print(json.dumps(data))
        return
    if error is None:
        if index:
            print()
        _print_table(traffic, ba_path, xla_error)


def _print_table(traffic, ba_path, xla_error) -> None:
    rows = [("kernel", "kind", "runs", "read", "written")]
    for k in traffic.kernels:
        rows.append((k.path or k.name, k.fusion_kind or k.opcode, str(k.executions),
                     f"{k.bytes_read:,}", f"{k.bytes_written:,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    print(f"module {traffic.module.name} ({traffic.module.source}): "
          f"{len(traffic.kernels)} kernels")
    for n, r in enumerate(rows):
        print("  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))
    print(f"bytes read     {traffic.bytes_read:>16,}")
    print(f"bytes written  {traffic.bytes_written:>16,}")
    print(f"bytes accessed {traffic.bytes_accessed:>16,}  (read + written, loops x trip count)")
    spaces = traffic.bytes_by_memory_space()
    for space, (r, w) in (spaces or {}).items():
        print(f"  in {space + ':':<11} {r + w:>16,}  (read {r:,}, written {w:,})")
    if ba_path:
        print(f"temporaries    {traffic.temp_bytes:>16,}  in {len(traffic.temporaries)} "
              f"allocation(s), from {ba_path}")
    by = traffic.xla_cost_by
    if xla_error:
        print(f"XLA cost analysis unavailable: {xla_error}")
    elif traffic.xla_cost is not None and by:
        print(f"XLA bytes accessed {traffic.xla_cost['bytes accessed']:>12,.0f}  ({by})")
    elif traffic.xla_cost is not None:
        cost = traffic.xla_cost
        print(f"XLA bytes accessed {cost.get('bytes accessed', float('nan')):>12,.0f}  "
              f"(HloCostAnalysis)")
        print(f"XLA flops          {cost.get('flops', float('nan')):>12,.0f}  "
              f"transcendentals {cost.get('transcendentals', float('nan')):,.0f}")
    if traffic.xla_cost is not None:
        found = traffic.compare_with_xla()
        if not found:
            print("agreement: every instruction counts the same bytes in both models")
        else:
            print(f"differences ({len(found)}):")
            for d in found:
                print(f"  {d.instruction}: ours {d.ours:,.0f}, XLA {d.xla:,.0f}: {d.reason}")


# ---- tour ----------------------------------------------------------------------------------

def _register_tour(subparsers) -> None:
    p = subparsers.add_parser(
        "tour", help="rank the passes of an XLA dump folder by what they changed",
        description="Reads a folder written with XLA_FLAGS='--xla_dump_to=DIR "
                    "--xla_dump_hlo_pass_re=.*' (any platform): lists its modules, ranks the "
                    "passes of each by what they changed (bytes read and written, "
                    "instructions), and prints the byte arithmetic and a before/after excerpt.")
    p.add_argument("folder", help="the dump folder")
    p.add_argument("--module", help="only this module (name like jit_f, or module_0004.jit_f)")
    p.add_argument("--top", type=int, default=10, help="passes to show per module (default 10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-xla", action="store_true",
                   help="skip XLA's cost analysis (flops) of the ranked passes")
    p.set_defaults(run=run_tour)


def run_tour(args) -> int:
    from .dump import DumpError
    from .passes import tour

    try:
        report = tour(args.folder, module=args.module, top=max(0, args.top),
                      xla=not args.no_xla, progress_stream=sys.stderr)
    except DumpError as e:
        return _fail(str(e))
    except Exception as e:  # noqa: BLE001 - no traceback reaches a user (issue 11)
        return _fail(f"{args.folder}: internal error while touring it "
                     f"({type(e).__name__}: {e}); please report it with the folder")
    failed = [m for m in report["modules"] if "error" in m]
    for m in failed:
        print(f"error: {m['module']}: {m['error']}", file=sys.stderr)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        _print_tour(report)
    return EXIT_BAD_INPUT if failed else 0


def _print_tour(report: dict) -> None:
    import textwrap
    mods = report["modules"]
    print(f"{report['folder']}: {len(mods)} module(s)")
    for m in mods:
        state = "ERROR" if "error" in m else f"{m['passes_that_changed']} passes changed it"
        print(f"  {m['module']}: {m['snapshots']} snapshots, {state}")
    # the rules behind every figure below, as pytest_dumpref.xla.passes applies them
    print("\nHow the figures are counted:")
    for key, text in report["definitions"].items():
        print(textwrap.fill(text, 100, initial_indent=f"  [{key}] ", subsequent_indent="    ",
                            break_on_hyphens=False, break_long_words=False))
    for m in mods:
        if "error" in m:
            continue
        i, o, b = m["input"], m["optimized"], m["baseline"]
        print(f"\n== {m['module']} ==")
        print(f"before optimizations: {i['kernels']} kernels, read {i['bytes_read']:,} B, "
              f"written {i['bytes_written']:,} B")
        print(f"optimized:            {o['kernels']} kernels, read {o['bytes_read']:,} B, "
              f"written {o['bytes_written']:,} B")
        print("score = |d bytes read|/R0 + |d bytes written|/W0 + instructions changed/N0 "
              "([score] above), with")
        print(f"  R0 = {b['R0']:,} B read, W0 = {b['W0']:,} B written, N0 = {b['N0']:,} "
              f"instructions compared: the module before optimizations'")
        for p in m["passes"]:
            _print_pass(p)


def _delta(a: float, b: float) -> str:
    return f"{a:>14,.0f} -> {b:>14,.0f}  ({b - a:+,.0f})"


def _print_pass(p: dict) -> None:
    ins, k = p["instructions"], p["kernels"]
    step = "-" if p["step"] is None else f"{p['step']:04d}"
    print(f"\n{p['rank']:>2}. {p['pass']}  (step {step}, pipeline {p['pipeline'] or '-'})"
          f"  score {p['score']:.3f}")
    print(f"    file: {p['after_file']}")
    print(f"    instructions: +{len(ins['added'])} added, -{len(ins['removed'])} removed, "
          f"~{len(ins['rewritten'])} rewritten, {ins['renamed']} renamed (not counted)")
    print(f"    kernels:       {k['before']} -> {k['after']}")
    for label, ks in (("removed", k["removed"]), ("added", k["added"])):
        for x in ks[:6]:
            print(f"      {label} {x['name']} {x['shape']}: read {x['bytes_read']:,} B, "
                  f"written {x['bytes_written']:,} B")
        if len(ks) > 6:
            print(f"      ... {len(ks) - 6} more {label}")
    print(f"    bytes read:    {_delta(p['bytes_read']['before'], p['bytes_read']['after'])}")
    print(f"    bytes written: {_delta(p['bytes_written']['before'], p['bytes_written']['after'])}")
    x = p.get("xla")
    if x and "error" in x:
        print(f"    XLA cost analysis: {x['error']}")
    elif x:
        print(f"    XLA flops:     {_delta(x['flops']['before'], x['flops']['after'])}")
        print(f"    XLA bytes accessed: {_delta(x['bytes_accessed']['before'], x['bytes_accessed']['after'])}")
    for side in ("before", "after"):
        print(f"    {side}:")
        for line in p["excerpt"][side].splitlines():
            print(f"      {line}")
