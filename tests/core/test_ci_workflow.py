"""The CI recipe, docs/ci/dumpref.yml: the file ``init`` writes as .github/workflows/dumpref.yml,
valid for GitHub Actions, and its ``run:`` steps, run as the runner runs them (``bash -eo
pipefail``) in a fresh virtual environment against a scaffolded project, install the plugin
and re-prove the write-up; a hand-edited write-up fails the job.

PyYAML is not installed here (nothing installed depends on it: only pytest's own ``dev`` extra
names it), so the file is read with mini_yaml.py, which refuses any YAML outside the small
part it knows; when PyYAML happens to be importable the two readings are compared too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mini_yaml
from pytest_dumpref import scaffold

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "docs" / "ci" / "dumpref.yml"


def workflow() -> dict:
    return mini_yaml.load(RECIPE.read_text(encoding="utf-8"))


def steps() -> list:
    return workflow()["jobs"]["check"]["steps"]


def test_the_recipe_is_the_file_init_writes():
    assert RECIPE.read_bytes() == scaffold.WORKFLOW.encode("utf-8"), (
        "docs/ci/dumpref.yml and pytest_dumpref/scaffold.py's WORKFLOW differ: change both")


def test_the_recipe_is_a_workflow_that_installs_and_checks():
    wf = workflow()
    assert wf["on"] == ["push", "pull_request"]
    job = wf["jobs"]["check"]
    assert job["runs-on"] == "ubuntu-latest"
    uses = [s["uses"] for s in job["steps"] if "uses" in s]
    assert uses == ["actions/checkout@v4", "actions/setup-python@v5"], uses
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert len(runs) + len(uses) == len(job["steps"]), "a step that neither uses nor runs"
    assert "$DUMPREF_INSTALL" in runs[0] and "DUMPREF_INSTALL" in job["env"]
    assert runs[-1].strip() == "python -m pytest claims/ --dumpref-check=writeup.md"
    try:
        import yaml
    except ImportError:
        return
    other = yaml.safe_load(RECIPE.read_text())
    other["on"] = other.pop(True)      # YAML 1.1 reads the key `on` as true; GitHub does not
    assert other == wf


@pytest.mark.parametrize("text, why", [
    ("a: &x 1\nb: *x\n", "outside the YAML"),
    ("a:\n\tb: 1\n", "tab"),
    ("a: >\n  folded\n", "literal block"),
    ("a: 1\na: 2\n", "given twice"),
    ("a: {b: 1}\n", "outside the YAML"),
    ("a: 1\n  b: 2\n", "indented more"),
    ('a: "open\n', "must close"),
])
def test_the_reader_refuses_yaml_it_does_not_know(text, why):
    with pytest.raises(mini_yaml.YamlError, match=why):
        mini_yaml.load(text)


def test_the_reader_reads_what_the_recipe_uses():
    doc = mini_yaml.load("# c\nk: v  # note\nl: [a, b]\ns:\n  - x: 1\n    y: |\n      one\n"
                         "      two\n  - plain\nq: \"a # b\"\n")
    assert doc == {"k": "v", "l": ["a", "b"], "s": [{"x": "1", "y": "one\ntwo\n"}, "plain"],
                   "q": "a # b"}


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DUMPREF_", "PYTHON", "VIRTUAL_ENV", "PYTEST_"))}
    env.pop("XLA_FLAGS", None)
    env.update(extra)
    return env


def _package_source(dest: Path) -> Path:
    """The package as an sdist would carry it, copied out of the checkout so that building it
    writes nothing into the repository."""
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
    for name in ("pytest_dumpref", "plugin_c"):
        shutil.copytree(REPO / name, dest / name, ignore=ignore)
    return dest


# Names of this environment's site-packages that the fresh venv does not see: the package
# itself (the recipe installs it), any editable install, pip and setuptools (the venv has its
# own), and .pth hooks.
_NOT_LENT = ("pytest_dumpref", "__editable__", "_distutils_hack", "pip", "setuptools",
             "pkg_resources", "__pycache__")


def _lend_dependencies(venv: Path, into: Path) -> None:
    """Make this environment's installed packages (jax, jaxlib, numpy, pytest...) visible to
    ``venv`` through a folder of links and one .pth file, leaving out _NOT_LENT: pip in the venv
    then finds the plugin's dependencies already satisfied and installs the plugin alone, as
    it would on a runner whose pip cache is warm, in seconds instead of the minute or two that
    unpacking jaxlib and scipy takes on a busy machine.  DUMPREF_TEST_FULL_INSTALL=1 skips this
    (pip then installs everything from the index)."""
    import sysconfig
    site = Path(sysconfig.get_paths()["purelib"])
    into.mkdir()
    for entry in site.iterdir():
        if entry.name.startswith(_NOT_LENT) or entry.suffix == ".pth":
            continue
        (into / entry.name).symlink_to(entry)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "zz-lent-dependencies.pth").write_text(f"{into}\n")


def test_the_recipe_runs_in_a_fresh_venv_against_a_scaffolded_project(tmp_path):
    """The two ``uses:`` steps are what this test stands in for: the project folder is the
    checkout, the fresh venv the set-up Python.  Every ``run:`` step runs verbatim with
    ``bash --noprofile --norc -eo pipefail`` (GitHub's shell for ``run``), with the job's env,
    ``DUMPREF_INSTALL`` pointing at a copy of this checkout (the package is not taken from an
    index).  The venv sees this environment's dependencies (``_lend_dependencies``) unless
    DUMPREF_TEST_FULL_INSTALL=1; the plugin itself is built and installed into the venv by the
    recipe's pip command either way, and the test checks that the check ran from there."""
    project = tmp_path / "project"
    r = subprocess.run([sys.executable, "-m", "pytest_dumpref", "init", str(project)],
                       capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert (project / ".github" / "workflows" / "dumpref.yml").read_bytes() == RECIPE.read_bytes()
    render = subprocess.run([sys.executable, "-m", "pytest", "claims/", "--dumpref-report=writeup.md",
                             "-p", "no:cacheprovider", "-q"], cwd=project, capture_output=True,
                            text=True, env=_clean_env(), timeout=300)
    assert render.returncode == 0, render.stdout[-3000:] + render.stderr[-2000:]

    source = tmp_path / "pytest-dumpref"
    source.mkdir()
    _package_source(source)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    if os.environ.get("DUMPREF_TEST_FULL_INSTALL") != "1":
        _lend_dependencies(venv, tmp_path / "lent-site-packages")
    job = workflow()["jobs"]["check"]
    assert set(job["env"]) == {"DUMPREF_INSTALL"}, job["env"]
    env = _clean_env(**{**job["env"], "DUMPREF_INSTALL": str(source)}, VIRTUAL_ENV=str(venv),
                     PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", CI="true")

    def run_steps():
        out = []
        for step in job["steps"]:
            if "run" not in step:
                continue
            t = time.monotonic()
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                                  cwd=project, env=env, capture_output=True, text=True, timeout=900)
            out.append((step.get("name", step["run"]), done, time.monotonic() - t))
            if done.returncode != 0:
                break
        return out

    results = run_steps()
    for name, done, _ in results:
        assert done.returncode == 0, f"step {name!r} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert len(results) == 2
    installed = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import pytest_dumpref, sys; print(pytest_dumpref.__file__)"],
                               cwd=project, capture_output=True, text=True, env=env)
    assert str(venv) in installed.stdout, installed.stdout + installed.stderr
    assert "every line of writeup.md reproduces" in results[-1][1].stdout, results[-1][1].stdout[-2000:]

    # the job fails when the write-up says what the run does not reproduce
    md = project / "writeup.md"
    md.write_text(md.read_text().replace("| fusion kernels | 1 |", "| fusion kernels | 2 |"))
    check = job["steps"][-1]["run"]
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", check],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "dumpref check FAILED" in done.stdout, done.stdout[-2000:]
