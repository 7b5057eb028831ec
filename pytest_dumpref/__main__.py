"""The command line: ``python -m pytest_dumpref {tour,traffic,fusion,build-plugin,init} ...``.

Each room registers its own subcommands (``register(subparsers)`` in ``xla/cli.py`` and
``pjrt/cli.py``); this file only dispatches, so every analysis stays usable without pytest.
"""
from __future__ import annotations

import argparse
import importlib
import sys

ROOMS: tuple[str, ...] = ("pytest_dumpref.xla.cli", "pytest_dumpref.xla.fusion_cli", "pytest_dumpref.pjrt.cli")
ROOMS += ("pytest_dumpref.scaffold",)   # init: a project of your own (scaffold.py)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dumpref",
                                     description="Analyse XLA dumps and build the dumpref PJRT plugin.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for room in ROOMS:
        importlib.import_module(room).register(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
