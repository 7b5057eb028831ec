"""Run jax against the dumpref plugin in a subprocess and read back its call trace.

A subprocess because jaxlib turns most PJRT errors into fatal aborts: a knocked-out entry point
must be able to kill the process that used it without killing the test run.  The plugin is
registered the way users get it, through the ``jax_plugins`` entry point
(:mod:`.jax_plugin`), told by ``DUMPREF_PJRT_LIBRARY`` to load this exact library.

The trace (``DUMPREF_PJRT_TRACE``, written by ``plugin_c/hooks.c``) holds one record per call:
the args struct's bytes as jax filled it and as the entry point left it.  :mod:`.calls` decodes
them field by field with the real ``pjrt_c_api.h``.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

#: Prepended to every snippet.  Deliberately no device lookup: level 1 *is* the lookup.
PRELUDE = "import jax, jax.numpy as jnp, numpy as np\n"

#: Lines of jaxlib/absl chatter that never explain a failure.
_NOISE = ("Platform 'dumpref' is experimental", "WARNING: All log messages before absl",
          "Jax plugin configuration error")


@dataclass
class JaxRun:
    returncode: int
    stdout: str
    stderr: str
    trace: list[str]    # the entry points called, in call order
    crashed: bool       # killed by a signal (jaxlib's fatal CHECKs abort: SIGABRT)
    records: list[dict] = field(default_factory=list)  # the raw trace records (hooks.c)
    library_base: int | None = None                   # where the library was loaded

    def calls(self, library: Path):
        """The records decoded field by field (:class:`.calls.Call`), for this library."""
        from .calls import decode_records
        return decode_records(self.records, library, self.library_base)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def printed(self, line: int = -1):
        """The JSON value the snippet printed on one line of its stdout (the last by default):
        how a snippet hands its measurements back."""
        return json.loads(self.stdout.strip().splitlines()[line])

    @property
    def why(self) -> str:
        """One line saying how the run ended badly, stable across runs (no times, no pids)."""
        lines = [ln.strip() for ln in self.stderr.splitlines()
                 if ln.strip() and not any(n in ln for n in _NOISE)]
        telling = ""
        for ln in reversed(lines):
            # absl fatal lines ("F1130 07:18:28.66 17651 file.cc:139] ...") and Python
            # exceptions ("jax.errors.JaxRuntimeError: ...") say most.
            if _ABSL.match(ln) or "Error: " in ln or "Error:" == ln.split(" ")[0][-6:]:
                telling = ln
                break
        if not telling and lines:
            telling = lines[-1]
        telling = _tidy(telling)
        if self.crashed:
            sig = -self.returncode
            name = signal.Signals(sig).name if sig in {s.value for s in signal.Signals} else str(sig)
            return f"{name}: {telling}" if telling else name
        return telling or f"exit status {self.returncode}"


#: absl log prefix: severity, date, time, thread id, then "file:line] ".
_ABSL = re.compile(r"^[FEWI]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ")


def _tidy(line: str) -> str:
    """Drop what changes from run to run or only repeats the knock-out itself."""
    m = _ABSL.match(line)
    if m:
        line = "jaxlib fatal error at " + line[m.end():].replace("] ", ": ", 1)
    line = re.sub(r"\S+ is knocked out \(DUMPREF_PJRT_DISABLE\) in the dumpref PJRT device",
                  "UNIMPLEMENTED (knocked out)", line)
    line = line.replace("UNIMPLEMENTED: UNIMPLEMENTED (knocked out)", "UNIMPLEMENTED (knocked out)")
    line = re.sub(r"\s*\(you may need to uninstall the failing plugin package.*$", "", line)
    return line


def run_jax(library: Path, code: str, *, env: dict | None = None, trace: bool = True,
            disable: Sequence[str] = (), timeout: float = 180) -> JaxRun:
    """Run ``PRELUDE + code`` in a fresh Python with the plugin at ``library`` registered."""
    with tempfile.TemporaryDirectory(prefix="dumpref-jax-") as tmp:
        trace_file = Path(tmp) / "trace.txt"
        full_env = dict(os.environ)
        for var in ("DUMPREF_PJRT_TRACE", "DUMPREF_PJRT_DISABLE", "DUMPREF_PJRT"):
            full_env.pop(var, None)
        full_env["DUMPREF_PJRT"] = "1"  # the device is opt-in (jax_plugin.wanted)
        full_env["DUMPREF_PJRT_LIBRARY"] = str(library)
        if trace:
            full_env["DUMPREF_PJRT_TRACE"] = str(trace_file)
        if disable:
            full_env["DUMPREF_PJRT_DISABLE"] = ",".join(disable)
        full_env.update(env or {})
        try:
            done = subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=tmp, env=full_env,
                                  capture_output=True, text=True, timeout=timeout)
            rc, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as e:
            rc = -signal.SIGKILL
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = ((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")) + f"\ntimed out after {timeout} s"
        records, base = read_trace(trace_file) if trace and trace_file.exists() else ([], None)
        return JaxRun(returncode=rc, stdout=out, stderr=err, trace=[r["fn"] for r in records],
                      crashed=rc < 0, records=records, library_base=base)


def read_trace(path: Path) -> tuple[list[dict], int | None]:
    """The call records of a trace file and the library's load address.  A record cut short
    (the process died while writing it) is kept by name only."""
    records, base = [], None
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            m = re.match(r'\{"fn": "(\w+)"', line)
            if m:
                records.append({"fn": m.group(1), "truncated": True})
            continue
        if "library_base" in rec:
            base = int(rec["library_base"], 16)
        elif "fn" in rec:
            records.append(rec)
    return records, base


def as_run(code: str) -> str:
    """A snippet as the runner executes it: the prelude, then the snippet."""
    return PRELUDE + code.strip() + "\n"
