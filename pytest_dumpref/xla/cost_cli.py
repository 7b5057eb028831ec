"""Command line of the kernel cost model: ``python -m pytest_dumpref calibrate [--out FILE]``
and ``python -m pytest_dumpref cost FILE... [--rates FILE] [--json]`` (``xla/cli.py`` registers
them).  The rates are ``calibrate.py``'s, the model ``cost_model.py``'s."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import calibrate as cal
from . import cost_model

DEFAULT_RATES = "dumpref-rates.json"


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
                    "class that bounds it) and the program's total, at the rates of --rates. "
                    "A kernel the model has no rate for is named and the file fails (exit 2).")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="*.cpu_after_optimizations.txt files; the '-buffer-assignment.txt' beside "
                        "each is used when present")
    p.add_argument("--rates", metavar="FILE",
                   help=f"rates from 'calibrate' (default: {DEFAULT_RATES} if it exists, else "
                        "calibrate now)")
    p.add_argument("--json", action="store_true", help="one JSON object per line and file")
    p.set_defaults(run=run_cost)


def _print_rates(rates, seconds: float) -> None:
    print(f"calibrated in {seconds:.1f} s on {rates.machine.get('cpu', '?')} "
          f"(load average {', '.join(f'{x:.2f}' for x in rates.machine.get('load average', []))})")
    print(f"dispatch: {rates.dispatch_inline_s * 1e6:.1f} us inline, {rates.dispatch_async_s * 1e6:.1f} us on "
          f"the worker thread; launch {rates.launch_s * 1e6:.2f} us a kernel; page fault {rates.fault_s * 1e6:.2f} us")
    print("memory, by reuse distance: " + ", ".join(
        f"{d / 2 ** 20:g} MiB {c * 1e12:.1f} ps/B" for d, c in rates.curve))
    print("compute: " + ", ".join(f"{k} {v * 1e12:.2f} ps" for k, v in rates.compute.items())
          + " (per element; dot and convolution per flop)")
    for cls, why in rates.unmeasured.items():
        print(f"not measured: {cls}: {why}")
    for row in rates.checks:
        print(f"  check {row['kernel']:<12} measured {row['measured us']:9.1f} us, predicted "
              f"{row['predicted us']:9.1f} us ({row['measured/predicted']:.3f})")


def run_calibrate(args) -> int:
    from ..timing import TimingError
    try:
        rates, _, seconds = cal.calibrate(rounds=args.rounds)
    except TimingError as e:
        print(f"error: calibration failed: {e}", file=sys.stderr)
        return 2
    cal.save(rates, args.out)
    _print_rates(rates, seconds)
    print(f"rates written to {args.out}")
    return 0


def run_cost(args) -> int:
    path = args.rates or (DEFAULT_RATES if Path(DEFAULT_RATES).is_file() else None)
    if path:
        try:
            rates = cost_model.Rates.load(path)
        except (OSError, ValueError, TypeError, KeyError) as e:
            print(f"error: {path}: not a rates file from 'calibrate' ({e})", file=sys.stderr)
            return 2
    else:
        print("no rates file: calibrating now (save them with 'calibrate')", file=sys.stderr)
        rates, _, _ = cal.calibrate()
    failed = 0
    for f in args.files:
        f = Path(f)
        try:
            text, ba_text = cal.read_optimized(f)
            pred = cost_model.predict_text(text, ba_text, rates, source=str(f), scalar_kernels=cal.scalar_kernels(f))
        except (OSError, UnicodeDecodeError) as e:
            failed += 1
            print(f"error: {f}: cannot read: {e}", file=sys.stderr)
            continue
        except ValueError as e:      # CostModelError and HloParseError are ValueErrors
            failed += 1
            msg = str(e)
            print(f"error: {msg if msg.startswith(str(f)) else f'{f}: {msg}'}", file=sys.stderr)
            if args.json:
                print(json.dumps({"file": str(f), "error": msg}))
            continue
        if args.json:
            print(json.dumps(dict(pred.as_dict(), file=str(f), buffer_assignment=ba_text is not None)))
            continue
        print(f"{f}: {pred.module}, {len(pred.kernels)} kernels"
              + ("" if ba_text is not None else " (no buffer assignment: one buffer per instruction)"))
        print(f"  {'kernel':<36} {'kind':<8} {'us':>9} {'memory':>9} {'compute':>9}  regime")
        for k in pred.kernels:
            print(f"  {k.name:<36} {k.kind:<8} {k.seconds * 1e6:9.1f} {k.memory_s * 1e6:9.1f} "
                  f"{k.compute_s * 1e6:9.1f}  {k.regime}")
        print(f"  total {pred.total_s * 1e6:.1f} us (dispatch {pred.dispatch_s * 1e6:.1f} us)")
    return 2 if failed else 0
