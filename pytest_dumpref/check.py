"""``--dumpref-check``: does the committed write-up still reproduce?

Compares, claim by claim, what a run recorded against the write-up's data block.
Deterministic values (byte counts, hashes, anything without a tolerance) must be equal;
measured ones must fall within the relative tolerance the write-up states for them.
"""
from __future__ import annotations

import math


def _same(written, now, tolerance: float | None) -> bool:
    if isinstance(written, bool) or isinstance(now, bool) or tolerance is None:
        if isinstance(written, float) or isinstance(now, float):
            # exact, up to the last bits of float summation order
            return math.isclose(written, now, rel_tol=1e-12, abs_tol=0.0)
        return written == now
    if written == now:
        return True
    return abs(now - written) <= tolerance * abs(written)


def compare_claim(nodeid: str, written: dict | None, record: dict) -> list[str]:
    """Problems (sentences naming claim and number) for one claim that ran and passed."""
    if written is None:
        return [f"claim {nodeid} is not in the write-up (re-render it with --dumpref-report)"]
    problems = []
    if written.get("outcome") != "passed":
        problems.append(f"claim {nodeid} now passes but the write-up lists it as {written.get('outcome')}")
    if written.get("text") != record["text"]:
        problems.append(f"claim {nodeid}: its sentence changed from {written.get('text')!r} to {record['text']!r}")
    numbers = {i["name"]: i for i in record["evidence"] if i["kind"] == "number"}
    for name, w in written.get("numbers", {}).items():
        if name not in numbers:
            problems.append(f"claim {nodeid}: number {name!r} is in the write-up but the claim no longer records it")
            continue
        now = numbers[name]["value"]
        tol = w.get("tolerance")
        if not _same(w["value"], now, tol):
            bound = "exactly" if tol is None else f"within ±{tol:.0%}"
            unit = f" {w['unit']}" if w.get("unit") else ""
            problems.append(f"claim {nodeid}: number {name!r} does not reproduce: write-up says "
                            f"{w['value']!r}{unit}, this run measured {now!r}{unit} (must match {bound})")
    for name in sorted(set(numbers) - set(written.get("numbers", {}))):
        problems.append(f"claim {nodeid}: number {name!r} is not in the write-up")
    files = {i["title"]: i["sha256"] for i in record["evidence"] if i["kind"] == "file"}
    for title, digest in written.get("files", {}).items():
        if title not in files:
            problems.append(f"claim {nodeid}: file {title!r} is in the write-up but no longer recorded")
        elif files[title] != digest:
            problems.append(f"claim {nodeid}: file {title!r} changed: sha256 {digest[:16]}… in the write-up, "
                            f"{files[title][:16]}… now")
    for title in sorted(set(files) - set(written.get("files", {}))):
        problems.append(f"claim {nodeid}: file {title!r} is not in the write-up")
    return problems


def covered_by(args: list[str]):
    """Which node ids a run over ``args`` (rootdir-relative "path" or "path::name") would
    collect, so that checking one claim against a write-up does not call the others gone."""
    def covers(nodeid: str) -> bool:
        for arg in args:
            if "::" in arg:
                if nodeid == arg or nodeid.startswith(arg + "[") or nodeid.startswith(arg + "::"):
                    return True
            else:
                path = nodeid.split("::", 1)[0]
                if arg in ("", ".") or path == arg or path.startswith(arg.rstrip("/") + "/"):
                    return True
        return False
    return covers


def missing_claims(written_claims: dict, outcomes: dict[str, str], covers=lambda nodeid: True) -> list[str]:
    """Claims the write-up established that this run did not establish (gone or skipped),
    among those the run was asked to run.  Failures are reported by the failing tests."""
    out = []
    for nodeid, w in sorted(written_claims.items()):
        if w.get("outcome") != "passed" or not covers(nodeid):
            continue
        now = outcomes.get(nodeid)
        if now is None:
            out.append(f"claim {nodeid} is established in the write-up but did not run: it is gone or was renamed")
        elif now == "skipped":
            out.append(f"claim {nodeid} is established in the write-up but was skipped in this run")
    return out
