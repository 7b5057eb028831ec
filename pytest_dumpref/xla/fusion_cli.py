"""``python -m pytest_dumpref fusion DIR [--module NAME] [--json]``: every decision of XLA's
CPU fusion pass in a dump folder, the compiler's verdict beside the model's prediction.  A
module from another backend (a TPU's ``tpu_fusion``, whose log names the source line of each
reason) is reported from its log alone: its fusions, and its refusals grouped by reason.

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
        "fusion", help="every decision of XLA's fusion pass: the compiler's log against the model "
                       "(XLA:CPU), or grouped by reason (TPU)",
        description="Reads a dump folder written with XLA_FLAGS='--xla_dump_to=DIR "
                    "--xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization' and prints, per "
                    "module, every decision of the fusion pass in its order: producer, consumer, "
                    "the compiler's verdict (from its log) and the model's prediction "
                    "(pytest_dumpref.xla.cpu.fusion_policy, which replays the pass on the snapshot it saw).")
    p.add_argument("folder", help="the dump folder")
    p.add_argument("--module", help="only this module (name like jit_f, or module_0004.jit_f)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run_fusion)


def run_fusion(args) -> int:
    from .cpu.fusion import ModuleTrouble, fusion_report
    from .cpu.fusion_policy import FusionModelError
    from .dump import DumpError, DumpFolder
    from .fusion_log import FusionLogError, ModuleLog, module_log
    from .hlo import HloParseError
    from .naming import BACKENDS
    try:
        # the model restates XLA:CPU's pass (cpu/); another backend's modules: their log alone
        folder = DumpFolder(args.folder)
        found = folder.find(args.module)
        others = [m for m in found if m.backend not in (None, "cpu")]
        report = fusion_report(args.folder, module=args.module) if len(others) < len(found) or not found else []
        for m in others:
            try:
                report.append(module_log(folder.folder, m.key, m.id, m.backend or ""))
            except FusionLogError as e:
                off = [p for p in m.disabled_passes() if p in BACKENDS[m.backend or ""].fusion_passes]
                if off:   # no log to read: the compile disabled the pass that writes it
                    report.append(ModuleLog(m.key, m.backend or "", [], note=(
                        f"no fusion log: the compile disabled {', '.join(off)} "
                        f"(xla_disable_hlo_passes in {m.debug_options.name if m.debug_options else ''})")))
                else:
                    report.append(ModuleTrouble(m.key, str(e)))
        order = {m.key: n for n, m in enumerate(folder.modules)}
        report.sort(key=lambda r: order.get(r.module, -1))
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
    from .cpu.fusion import ModuleTrouble
    from .fusion_log import ModuleLog
    for m in report:
        print(f"== {m.module} ==")
        if isinstance(m, ModuleTrouble):
            print(f"not analysed: {m.error}")
            print()
            continue
        if isinstance(m, ModuleLog):
            _print_log(m)
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


def _print_log(m) -> None:
    """A module of a backend without a fusion model here: the log, refusals by reason."""
    print(f"compiled for {m.backend}; no model of its fusion policy here: the compiler's log only")
    if m.note:
        print(m.note)
    print(f"{m.fused} fusions, {m.refused} refusals logged")
    for d in m.log:
        if d.fused:
            print(f"  fused {d.producer} into {d.fusion}")
    print("refusals by reason (a refusal with several clauses is under each; each edge once):")
    for clause, group in m.by_reason().items():
        print(f"  {clause.text}" + (f"  [{clause.source}]" if clause.source else ""))
        print("      " + ", ".join(f"{d.producer} -> {d.consumer}" for d in group))
    print()
