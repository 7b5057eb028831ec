"""``python -m pytest_dumpref init [DIR]``: a write-up of your own, ready to render and check.

Writes three things into DIR (default: the current folder), and nothing else:

* a ``[tool.dumpref]`` section: a new ``pyproject.toml`` (with a ``[tool.pytest.ini_options]``
  that makes DIR pytest's rootdir), or appended to an existing one that has none (one that
  already has ``[tool.dumpref]``, or is not valid TOML, is refused);
* ``claims/test_my_program.py``: one claim about a placeholder jax function, ``my_program``,
  that the ``dump`` fixture compiles and whose optimized program's fusion kernels the claim
  counts (replace the function with yours and restate the claim);
* ``.github/workflows/dumpref.yml``: the CI recipe (``docs/ci/dumpref.yml`` of this
  repository, the same bytes), which installs the project and runs ``--dumpref-check``.

Every path is checked before anything is written: if one of the files exists, ``init`` names
it, writes nothing at all and exits 1.  Then, in DIR::

    python -m pytest claims/ --dumpref-report=writeup.md    # render the write-up
    python -m pytest claims/ --dumpref-check=writeup.md     # re-prove it (what the CI job runs)

Nothing here imports pytest or jax.
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

EXIT_REFUSED = 1

PYPROJECT = "pyproject.toml"
CLAIM_FILE = "claims/test_my_program.py"
WORKFLOW_FILE = ".github/workflows/dumpref.yml"

TOOL_SECTION = '''\
[tool.dumpref]
# pytest-dumpref: `python -m pytest claims/ --dumpref-report=writeup.md` renders the passing
# claims into writeup.md; `--dumpref-check=writeup.md` re-proves it (the CI job in
# .github/workflows/dumpref.yml runs that).  Every key is described in pytest-dumpref's README.
title = "What the compiler did to my_program"
claims = ["claims"]                      # where the claim files live
setup = "pip install pytest-dumpref"     # the set-up command the write-up prints
# sections = ["fusion"]                  # study markers (@pytest.mark.fusion), in write-up order
'''

# Only in a new pyproject.toml: it makes DIR pytest's rootdir even inside a folder whose own
# pytest configuration would otherwise claim it (the plugin reads [tool.dumpref] at the rootdir).
PYTEST_SECTION = '''\
[tool.pytest.ini_options]
# this folder is pytest's rootdir: [tool.dumpref] below is read from here
testpaths = ["claims"]

'''

CLAIM = '''\
"""One claim of the write-up: a test whose assertions decide it and whose evidence the
write-up shows.  Replace my_program with a jax function of yours (or import it from your
package), then restate the sentence, the provenance and the assertions: a claim that no
longer holds fails, and `--dumpref-report` leaves it out of the write-up."""
import jax.numpy as jnp
import numpy as np
import pytest


def my_program(x):
    """A placeholder for your program: a scale, a shift and a tanh, elementwise."""
    return jnp.tanh(x * 2.0 + 1.0)


x = np.ones((256, 256), np.float32)


@pytest.mark.claim("XLA's CPU compiler turns my_program over f32[256,256] into one fusion kernel, "
                   "which reads its input once and writes its output once.",
                   title="my_program compiles to one fusion kernel")
@pytest.mark.provenance(dtype="f32", shapes={"x": (256, 256)},
                        method="fusion instructions of the optimized module's entry computation; "
                               "bytes read plus written by its kernels")
def test_my_program_is_one_fusion_kernel(dump, evidence):
    d = dump(my_program, x)          # every-pass XLA dump of jax.jit(my_program)(x)
    evidence.number("fusion kernels", len(d.fusion_kernels))
    evidence.number("bytes read and written", d.traffic, unit="B")
    evidence.number("bytes of the input and the output", 2 * x.nbytes, unit="B")
    assert len(d.fusion_kernels) == 1
    assert d.traffic == 2 * x.nbytes
'''

# The CI recipe.  docs/ci/dumpref.yml holds the same text (tests/core/test_ci_workflow.py
# checks that they are equal and runs its steps); it is kept here too so that a non-editable
# install, which ships only the package, can write it.
WORKFLOW = '''\
# Re-prove the committed write-up on every push and pull request: the job fails when a claim
# no longer holds or a line of writeup.md does not reproduce, and its log names the line, the
# claim, what the file says and what the run produced.  Written by `python -m pytest_dumpref
# init`; the same file as docs/ci/dumpref.yml of pytest-dumpref.
name: dumpref
on: [push, pull_request]
jobs:
  check:
    runs-on: ubuntu-latest
    env:
      # what pip installs for the plugin: a name, a pinned version, a path or a git URL
      DUMPREF_INSTALL: pytest-dumpref
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - name: Install pytest-dumpref and the project
        run: |
          python -m pip install "$DUMPREF_INSTALL"
          if [ -f requirements.txt ]; then python -m pip install -r requirements.txt; fi
          if [ -f setup.py ] || grep -qs '^\\[project\\]' pyproject.toml; then python -m pip install -e .; fi
      - name: Re-prove the write-up
        run: python -m pytest claims/ --dumpref-check=writeup.md
'''


class ScaffoldError(Exception):
    """``init`` refused; the message names the file, and nothing was written."""


@dataclass
class Planned:
    path: Path
    text: str
    append: bool = False      # append to an existing file (pyproject.toml) instead of creating it
    note: str = ""


def plan(folder) -> list[Planned]:
    """What ``init`` would write into ``folder``; raises ScaffoldError naming the first file that
    is in the way (it exists, or a folder of its path is a file)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ScaffoldError(f"{folder}: exists and is not a folder")
    out = [_pyproject_plan(folder / PYPROJECT)]
    for rel, text in ((CLAIM_FILE, CLAIM), (WORKFLOW_FILE, WORKFLOW)):
        path = folder / rel
        _refuse_if_in_the_way(folder, path)
        out.append(Planned(path, text, note="written"))
    return out


def _pyproject_plan(path: Path) -> Planned:
    if not path.exists():
        return Planned(path, PYTEST_SECTION + TOOL_SECTION, note="written, with [tool.dumpref]")
    if not path.is_file():
        raise ScaffoldError(f"{path}: exists and is not a file")
    try:
        old = path.read_text(encoding="utf-8")
        data = tomllib.loads(old)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ScaffoldError(f"{path}: cannot add [tool.dumpref] to it ({e})") from None
    if "dumpref" in data.get("tool", {}):
        raise ScaffoldError(f"{path}: already has [tool.dumpref]; init leaves a configured "
                            f"project alone")
    sep = "" if not old else ("\n" if old.endswith("\n") else "\n\n")
    addition = sep + TOOL_SECTION
    try:
        tomllib.loads(old + addition)
    except tomllib.TOMLDecodeError as e:  # a [tool] table written inline, say
        raise ScaffoldError(f"{path}: appending [tool.dumpref] would not be valid TOML ({e}); "
                            f"add the section by hand") from None
    return Planned(path, addition, append=True, note="[tool.dumpref] appended")


def _refuse_if_in_the_way(folder: Path, path: Path) -> None:
    if path.exists() or path.is_symlink():
        raise ScaffoldError(f"{path}: already exists; init overwrites nothing")
    for parent in path.relative_to(folder).parents:
        p = folder / parent
        if p != folder and p.exists() and not p.is_dir():
            raise ScaffoldError(f"{p}: exists and is not a folder (init would write {path} in it)")


def write(planned: list[Planned]) -> None:
    """Write what ``plan`` returned.  On an OS error, undo what was written and re-raise as
    ScaffoldError, so that a failed init leaves the folder as it found it."""
    done: list = []      # (path, original bytes or None, folders made)
    try:
        for p in planned:
            made = [d for d in reversed(p.path.parents) if not d.exists()]
            p.path.parent.mkdir(parents=True, exist_ok=True)
            if p.append:
                original = p.path.read_bytes()
                done.append((p.path, original, made))
                with open(p.path, "a", encoding="utf-8") as f:
                    f.write(p.text)
            else:
                done.append((p.path, None, made))
                with open(p.path, "x", encoding="utf-8") as f:
                    f.write(p.text)
    except OSError as e:
        for path, original, made in reversed(done):
            try:
                if original is None:
                    path.unlink(missing_ok=True)
                else:
                    path.write_bytes(original)
                for d in reversed(made):
                    d.rmdir()
            except OSError:
                pass
        raise ScaffoldError(f"{e.filename or planned[0].path}: {e.strerror}; nothing was kept") from None


def init(folder=".") -> list[Planned]:
    """Check, then write; returns what was written.  Raises ScaffoldError (nothing written)."""
    planned = plan(folder)
    write(planned)
    return planned


# ---- command line ----------------------------------------------------------------------------

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "init", help="start a write-up of your own: [tool.dumpref], an example claim, a CI workflow",
        description="Write a [tool.dumpref] section (a new pyproject.toml, or appended to one that "
                    "has none), claims/test_my_program.py (one claim about a placeholder jax "
                    "function) and .github/workflows/dumpref.yml (CI: --dumpref-check) into DIR. "
                    "Refuses, writing nothing, if any of them exists.")
    p.add_argument("dir", nargs="?", default=".", metavar="DIR",
                   help="the project folder (default: the current folder; made if missing)")
    p.set_defaults(run=_run)


def _run(args) -> int:
    try:
        written = init(args.dir)
    except ScaffoldError as e:
        print(f"init: {e}", file=sys.stderr)
        print("init: nothing was written", file=sys.stderr)
        return EXIT_REFUSED
    folder = Path(args.dir)
    for p in written:
        print(f"{os.path.relpath(p.path, folder)}: {p.note}")
    # one "cd" of its own, so that the lines pasted together into one shell run as written
    where = "" if os.path.abspath(args.dir) == os.getcwd() else f"  cd {shlex.quote(args.dir)}\n"
    print("next:\n" + where +
          "  python -m pytest claims/ --dumpref-report=writeup.md   # render the write-up\n"
          "  python -m pytest claims/ --dumpref-check=writeup.md    # re-prove it, as CI does")
    return 0
