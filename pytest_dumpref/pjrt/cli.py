"""``python -m pytest_dumpref build-plugin [--out DIR] [--minimal]``: build the PJRT plugin (or
the minimal one of Study 3's appendix), print its path."""
from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("build-plugin", help="build the dumpref PJRT plugin (C) and print its path")
    p.add_argument("--out", default=None,
                   help="folder for the library (default: the per-user cache, "
                        "$XDG_CACHE_HOME/pytest-dumpref/build-plugin, else "
                        "~/.cache/pytest-dumpref/build-plugin)")
    p.add_argument("--sanitize", action="store_true",
                   help="build with AddressSanitizer and UndefinedBehaviorSanitizer")
    p.add_argument("--minimal", action="store_true",
                   help="build the minimal plugin (plugin_c/minimal/minimal.c: levels 1 and 2 only)")
    p.set_defaults(run=_run)


def _run(args) -> int:
    from .build import BuildError, build_plugin, default_out_dir
    if args.out is None:
        args.out = default_out_dir()
    try:
        if args.minimal and args.sanitize:
            raise BuildError("--minimal and --sanitize do not go together (the sanitizer build "
                             "is the full plugin's)")
        built = build_plugin(args.out, sanitize=args.sanitize, minimal=args.minimal)
    except BuildError as e:
        print(f"build-plugin: {e}", file=sys.stderr)
        return 1
    print(built.path.resolve())
    return 0
