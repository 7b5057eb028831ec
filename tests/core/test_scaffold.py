"""``python -m pytest_dumpref init [DIR]``: from an empty folder, init then render then check
pass, in real subprocesses; an existing pyproject.toml without [tool.dumpref] gets it appended;
any file in the way is named, the exit code is 1, and every file is left byte-identical."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from pytest_dumpref import scaffold

REPO = Path(__file__).resolve().parents[2]


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DUMPREF_", "PYTEST_"))}
    env.pop("XLA_FLAGS", None)
    return env


def init(folder, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_dumpref", "init", str(folder)],
                          cwd=cwd, capture_output=True, text=True, env=clean_env(), timeout=120)


def pytest_in(folder, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, capture_output=True,
                          text=True, env=clean_env(), timeout=600)


def tree(folder: Path) -> dict:
    """Every file under folder, by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_init_then_render_then_check_from_an_empty_folder(tmp_path):
    """Inside a folder whose own pytest configuration would be the rootdir, so that the new
    project's pyproject.toml must make its folder the rootdir for [tool.dumpref] to be read."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    folder = tmp_path / "mine"
    folder.mkdir()
    t0 = time.monotonic()
    r = init(".", cwd=folder)
    assert r.returncode == 0, r.stderr
    t1 = time.monotonic()
    assert set(tree(folder)) == {"pyproject.toml", "claims/test_my_program.py",
                                 ".github/workflows/dumpref.yml"}
    for rel in tree(folder):
        assert rel in r.stdout, f"init did not say it wrote {rel}:\n{r.stdout}"
    assert "--dumpref-report=writeup.md" in r.stdout and "--dumpref-check=writeup.md" in r.stdout
    tool = tomllib.loads((folder / "pyproject.toml").read_text())["tool"]
    cfg = tool["dumpref"]
    assert cfg["claims"] == ["claims"] and tool["pytest"]["ini_options"]["testpaths"] == ["claims"]

    render = pytest_in(folder, "claims/", "--dumpref-report=writeup.md")
    assert render.returncode == 0, render.stdout[-3000:] + render.stderr[-2000:]
    t2 = time.monotonic()
    assert "1 passed" in render.stdout
    md = (folder / "writeup.md").read_text()
    assert md.startswith(f"# {cfg['title']}\n")
    assert "### my_program compiles to one fusion kernel" in md     # the claim's title=
    assert "| fusion kernels | 1 | exact |" in md
    assert "| bytes read and written | 524,288 B (512.00 KiB) | exact |" in md
    assert "Not established" in md and "1 claim established, 0 not established" in md

    check = pytest_in(folder, "claims/", "--dumpref-check=writeup.md")
    t3 = time.monotonic()
    assert check.returncode == 0, check.stdout[-3000:]
    assert "every line of writeup.md reproduces" in check.stdout
    print(f"init {t1 - t0:.1f} s, render {t2 - t1:.1f} s, check {t3 - t2:.1f} s, "
          f"total {t3 - t0:.1f} s")


def test_init_makes_a_missing_folder_and_appends_to_a_pyproject_without_dumpref(tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    old = '[project]\nname = "proj"\nversion = "0.1"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]'
    (folder / "pyproject.toml").write_text(old)          # no trailing newline
    r = init(folder)
    assert r.returncode == 0, r.stderr
    text = (folder / "pyproject.toml").read_text()
    assert text.startswith(old + "\n") and text.endswith(scaffold.TOOL_SECTION)
    data = tomllib.loads(text)
    assert data["project"]["name"] == "proj" and data["tool"]["pytest"]["ini_options"]
    assert data["tool"]["dumpref"]["claims"] == ["claims"]
    assert "[tool.dumpref] appended" in r.stdout

    fresh = tmp_path / "not" / "yet"
    assert init(fresh).returncode == 0
    assert (fresh / "claims" / "test_my_program.py").read_text() == scaffold.CLAIM


REFUSALS = {
    "pyproject with [tool.dumpref]": ({"pyproject.toml": '[tool.dumpref]\ntitle = "Mine"\n'},
                                      "pyproject.toml: already has [tool.dumpref]"),
    "pyproject with a dumpref key under [tool]": ({"pyproject.toml": '[tool]\ndumpref = {title = "x"}\n'},
                                                  "pyproject.toml: already has [tool.dumpref]"),
    "pyproject not TOML": ({"pyproject.toml": "[project\nname = 1\n"}, "pyproject.toml: cannot add"),
    "the claim exists": ({"pyproject.toml": "[project]\nname = \"p\"\n",
                          "claims/test_my_program.py": "# mine\n"},
                         "claims/test_my_program.py: already exists"),
    "the workflow exists": ({"pyproject.toml": "[project]\nname = \"p\"\n",
                             ".github/workflows/dumpref.yml": "name: mine\n"},
                            ".github/workflows/dumpref.yml: already exists"),
    "claims is a file": ({"claims": "not a folder\n"}, "claims: exists and is not a folder"),
    "pyproject is a folder": ({"pyproject.toml/x": ""}, "pyproject.toml: exists and is not a file"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_init_refuses_and_writes_nothing(tmp_path, case):
    """Each case is checked in a folder whose every other file init would write or append to
    is free (the pyproject it would append to is there), so a refusal that came after a
    first write would show as a changed file."""
    files, message = REFUSALS[case]
    folder = tmp_path / "p"
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (folder / "notes.txt").write_text("untouched\n")
    before = tree(folder)
    dirs_before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_dir())
    r = init(folder)
    assert r.returncode == scaffold.EXIT_REFUSED, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert str(folder) in r.stderr, "the message names the file by its path"
    assert "nothing was written" in r.stderr
    assert tree(folder) == before
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_dir()) == dirs_before


def test_a_write_that_fails_midway_leaves_the_folder_as_it_was(tmp_path):
    """An OS error on the last file (here: its folder cannot be made) undoes the append to
    pyproject.toml and the claim file written before it."""
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "pyproject.toml").write_bytes(b'[project]\nname = "p"\n')
    before = tree(folder)
    planned = scaffold.plan(folder)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    planned[-1].path = blocker / "sub" / "dumpref.yml"
    with pytest.raises(scaffold.ScaffoldError, match="nothing was kept"):
        scaffold.write(planned)
    assert tree(folder) == before
    assert not (folder / "claims").exists()


def test_the_command_line_lists_init():
    r = subprocess.run([sys.executable, "-m", "pytest_dumpref", "--help"], capture_output=True,
                       text=True, env=clean_env(), timeout=60)
    assert "init" in r.stdout
    r = subprocess.run([sys.executable, "-m", "pytest_dumpref", "init", "--help"], capture_output=True,
                       text=True, env=clean_env(), timeout=60)
    assert r.returncode == 0 and "[tool.dumpref]" in r.stdout


def test_the_next_steps_init_prints_paste_into_one_shell(tmp_path):
    """The lines after "next:" run as written when pasted together into one shell: the folder
    is entered once, and both commands then run there (the second used to cd again, from
    inside the folder, and fail)."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "pytest_dumpref", "init", "my-writeup"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    steps = done.stdout.split("next:\n", 1)[1].splitlines()
    assert [s.split("#")[0].strip() for s in steps] == [
        "cd my-writeup", "python -m pytest claims/ --dumpref-report=writeup.md",
        "python -m pytest claims/ --dumpref-check=writeup.md"]
    script = "\n".join(s.split("#")[0].strip().replace("python -m pytest", f"{sys.executable} -m pytest --co -q")
                       for s in steps)
    run = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
