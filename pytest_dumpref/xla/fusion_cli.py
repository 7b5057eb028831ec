"""``python -m pytest_dumpref fusion DIR [--module NAME] [--json]``: every decision of XLA's
CPU fusion pass in a dump folder, the compiler's verdict beside the model's prediction.

The folder must hold the pass's log (``*_fusion.html``, or ``*_fusion.pyz`` from jaxlib 0.11
on) and the pass snapshots; ``--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*
--xla_dump_fusion_visualization`` in XLA_FLAGS writes both.  Every module is reported: one
where the pass fused nothing with its refusals, one it logged nothing for with the model's
replay (which must predict nothing either).  A module that cannot be analysed is reported
(an ``error`` entry in ``--json``, one line on stderr) and the others still are; the exit
code is then 2.  A folder that cannot be read at all is one line on stderr, exit code 2.
"""
from __future__ import annotations

import json
import os
import sys

from . import EXIT_BAD_INPUT

# Each command imports the analysis it runs when it runs (no circle: they never import this
# file): `python -m pytest_dumpref` imports every room's command line just to list them.


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fusion", help="every decision of XLA's CPU fusion pass: the compiler's log against the model",
        description="Reads a dump folder written with XLA_FLAGS='--xla_dump_to=DIR "
                    "--xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization' and prints, per "
                    "module, every decision of the fusion pass in its order: producer, consumer, "
                    "the compiler's verdict (from its log) and the model's prediction "
                    "(pytest_dumpref.xla.fusion_policy, which replays the pass on the snapshot it saw).")
    p.add_argument("folder", help="the dump folder")
    p.add_argument("--module", help="only this module (name like jit_f, or module_0004.jit_f)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run_fusion)


def run_fusion(args) -> int:
    from .dump import DumpError
    from .fusion import FusionLogError, ModuleTrouble, fusion_report
    from .fusion_policy import FusionModelError
    from .hlo import HloParseError
    try:
        report = fusion_report(args.folder, module=args.module)
    except (DumpError, FusionLogError, FusionModelError, HloParseError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    troubles = [m for m in report if isinstance(m, ModuleTrouble)]
    for t in troubles:
        print(f"error: {t.error}", file=sys.stderr)
    try:
        if args.json:
            json.dump({"folder": str(args.folder), "modules": [m.as_dict() for m in report]},
                      sys.stdout, indent=2)
            print()
        else:
            _print(report)
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")
    return EXIT_BAD_INPUT if troubles else 0


def _cell(text, width: int) -> str:
    text = "-" if text is None else text
    text = text.replace(" ; multi-output fusion not supported by this pass", "")
    return text if len(text) <= width else text[:width - 1] + "…"


def _print(report) -> None:
    from .fusion import ModuleTrouble
    for m in report:
        print(f"== {m.module} ==")
        if isinstance(m, ModuleTrouble):
            print(f"not analysed: {m.error}")
            print()
            continue
        print(f"snapshot the pass saw: {m.before.path.name}"
              + ("" if m.changed else " (the pass changed nothing: the module the next pass saw)"))
        if not m.logged_files:
            print("the pass logged no decision for this module")
        if m.uncalled:
            print(f"computations no instruction calls, visited by the pass: {', '.join(m.uncalled)}")
        rows = m.rows
        w = [max([len(h)] + [len(r[k] or "-") for r in rows]) for h, k in
             (("producer", "producer"), ("consumer", "consumer"))]
        head = f"  {'#':>4}  {'producer':<{w[0]}}  {'consumer':<{w[1]}}  {'compiler':<44}  model"
        print(head)
        for k, r in enumerate(rows, 1):
            mark = " " if r["agree"] else "*"
            print(f"{mark} {k:>4}  {r['producer']:<{w[0]}}  {r['consumer']:<{w[1]}}  "
                  f"{_cell(r['compiler'], 44):<44}  {_cell(r['predicted'], 44)}")
        print(f"{m.agreed} of {len(m.log)} decisions predicted"
              + ("" if m.agreed == len(m.log) == len(rows) else
                 f" (* marks a difference; {len(rows)} rows)"))
        print("(refusals end with ' ; multi-output fusion not supported by this pass' in the log; "
              "shown without it)")
        print()
