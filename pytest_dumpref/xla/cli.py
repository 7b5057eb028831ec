"""Command line of the xla room: ``python -m pytest_dumpref traffic FILE [--json]``.

``register(subparsers)`` adds one subparser per command; each command is a
``_register_<name>`` function plus a ``run_<name>(args) -> exit code``, so a new command is
one more pair and one more line in ``register``.  Bad input ends in one line on stderr naming
the file, and exit code 2, never a traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2


def register(subparsers) -> None:
    _register_traffic(subparsers)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


# ---- traffic -------------------------------------------------------------------------------

def _register_traffic(subparsers) -> None:
    p = subparsers.add_parser(
        "traffic", help="bytes read and written per kernel of one HLO text file",
        description="Spill-style traffic of one HLO module: each kernel of the entry "
                    "computation reads its operands and writes its result. Compared with "
                    "XLA's own HloCostAnalysis, naming the instructions where they differ.")
    p.add_argument("file", help="an HLO text file (e.g. *.cpu_after_optimizations.txt)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--buffer-assignment", metavar="FILE",
                   help="buffer-assignment dump for the temporaries (default: the "
                        "'-buffer-assignment.txt' file next to FILE, if there is one)")
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
    from .hlo import HloParseError, parse_module
    from .traffic import module_traffic

    path = Path(args.file)
    try:
        text = _read(path)
        module = parse_module(text, source=str(path))
        ba_path = Path(args.buffer_assignment) if args.buffer_assignment else \
            _sibling_buffer_assignment(path)
        ba_text = _read(ba_path) if ba_path else None
        traffic = module_traffic(module, buffer_assignment_text=ba_text)
    except HloParseError as e:
        return _fail(str(e))
    except ValueError as e:
        return _fail(str(e))

    xla_error = None
    if not args.no_xla:
        from . import xla_private
        try:
            traffic.with_xla_cost(xla_private.cost_analysis(text, source=str(path)))
        except (ValueError, xla_private.XlaPrivateApiError) as e:
            xla_error = str(e)

    if args.json:
        data = traffic.as_dict()
        if ba_path:
            data["buffer_assignment"] = str(ba_path)
        if xla_error:
            data["xla_error"] = xla_error
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    _print_table(traffic, ba_path, xla_error)
    return 0


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
    if ba_path:
        print(f"temporaries    {traffic.temp_bytes:>16,}  in {len(traffic.temporaries)} "
              f"allocation(s), from {ba_path}")
    if xla_error:
        print(f"XLA cost analysis unavailable: {xla_error}")
    elif traffic.xla_cost is not None:
        cost = traffic.xla_cost
        print(f"XLA bytes accessed {cost.get('bytes accessed', float('nan')):>12,.0f}  "
              f"(HloCostAnalysis)")
        print(f"XLA flops          {cost.get('flops', float('nan')):>12,.0f}  "
              f"transcendentals {cost.get('transcendentals', float('nan')):,.0f}")
        found = traffic.compare_with_xla()
        if not found:
            print("agreement: every instruction counts the same bytes in both models")
        else:
            print(f"differences ({len(found)}):")
            for d in found:
                print(f"  {d.instruction}: ours {d.ours:,.0f}, XLA {d.xla:,.0f}: {d.reason}")
