"""The README, run: every fenced block is either run here, as a reader would run it, or listed in
NOT_RUN with the reason and what runs it instead.

Blocks are found with GitHub's own Markdown parser (gfm.py) and named by the heading they sit
under, so a block added to the README without a test here fails ``test_every_block_is_accounted_for``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from gfm import fenced_blocks

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# (heading, language, n-th block of that language under that heading) -> the test that runs it
RUN = {
    ("Quick start", "sh", 0): "test_quick_start_is_two_commands_in_a_venv_and_ci_runs_them",
    ("A claim is a test", "python", 0): "test_the_claim_example_is_a_claim_that_renders_and_checks",
    ("On a TPU", "python", 0): "test_the_tpu_example_renders_and_checks_on_a_tpu",
    ("On a TPU", "sh", 0): "test_the_tpu_example_renders_and_checks_on_a_tpu",
    ("Evidence kinds", "python", 0): "test_the_kind_of_your_own_renders_and_checks",
    ("Evidence kinds", "python", 1): "test_the_kind_of_your_own_renders_and_checks",
    ("Configuration", "toml", 0): "test_the_configuration_example_shapes_the_writeup",
    ("Measured values", "python", 0): "test_the_timing_example_renders_and_checks",
    ("Command line", "sh", 0): "test_the_command_line_as_written",
    ("Benchmarks", "sh", 0): "test_the_benchmark_commands_select_benchmarks",
    ("The kernel cost model: calibrate and cost", "sh", 0): "test_the_cost_model_commands_as_written",
    ("The kernel cost model: calibrate and cost", "python", 0): "test_the_kernel_perf_example_says_where_the_model_misses",
    ("The dumpref PJRT device", "python", 0): "test_the_device_examples_run_and_print_what_they_say",
    ("The dumpref PJRT device", "python", 1): "test_the_device_examples_run_and_print_what_they_say",
    ("Layout", "", 0): "test_the_layout_names_what_is_there",
    ("A write-up of your own: init, the API reference, CI", "sh", 0): "test_init_then_render_then_check_as_written",
}
# Blocks not run by the suite, with the reason.  Empty today: every block runs, some of them
# only in part (each test's docstring says what it leaves to CI).
NOT_RUN: dict = {}


def readme_blocks() -> dict:
    out, seen = {}, {}
    for b in fenced_blocks(README):
        key = (b.heading, b.lang)
        n = seen.get(key, 0)
        seen[key] = n + 1
        out[(b.heading, b.lang, n)] = b
    return out


def block(heading: str, lang: str, n: int = 0):
    key = (heading, lang, n)
    assert key in RUN, f"{key} is not in RUN"
    blocks = readme_blocks()
    assert key in blocks, f"README.md has no {lang or 'plain'} block #{n} under '{heading}'"
    return blocks[key]


def section(heading: str) -> str:
    """The README's text under ``## heading``, up to the next ``## ``."""
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README.md has no section '## {heading}'"
    return m.group(1)


def commands(text: str) -> list[str]:
    """The command lines of a shell block, each without its trailing ``# comment``."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def clean_env(**extra) -> dict:
    """The environment a reader's shell has: none of the DUMPREF_* switches the suite's own
    fixtures may have set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUMPREF_")}
    env.pop("XLA_FLAGS", None)
    env.update(extra)
    return env


def run(args, cwd, env=None, timeout=600):
    return subprocess.run(args, cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_every_block_is_accounted_for():
    blocks = set(readme_blocks())
    assert blocks, "no fenced blocks found in README.md"
    unaccounted = sorted(blocks - set(RUN) - set(NOT_RUN))
    assert not unaccounted, f"README blocks that no test runs (add a test or a NOT_RUN reason): {unaccounted}"
    stale = sorted((set(RUN) | set(NOT_RUN)) - blocks)
    assert not stale, f"RUN/NOT_RUN name blocks the README no longer has: {stale}"
    names = {n for n, v in globals().items() if n.startswith("test_") and callable(v)}
    assert set(RUN.values()) <= names, "RUN names a test that does not exist"


# ---- Quick start ---------------------------------------------------------------------------

VENV_PREFIX = ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -e '.[test]'"]


def test_quick_start_is_two_commands_in_a_venv_and_ci_runs_them():
    """Not run here: each command installs jax and the rest into a new venv, and the first
    re-renders the whole write-up (minutes).  What is checked: the block is two commands, each
    creates and uses a virtual environment before pip; CI's .ci/run makes the same venv, the
    same install and runs the second command as written (it runs the whole suite, so running it
    from inside the suite would recurse), then re-proves the write-up with the claims the first
    command renders."""
    lines = commands(block("Quick start", "sh").text)
    assert len(lines) == 2, f"the quick start is {len(lines)} commands, not two: {lines}"
    steps = [[s.strip() for s in line.split("&&")] for line in lines]
    for s in steps:
        assert s[:3] == VENV_PREFIX, f"a quick-start command must start with {VENV_PREFIX}: {s}"
    assert steps[0][3:] == ["python -m pytest claims/ --dumpref-report=writeup.md"]
    assert steps[1][3:] == ["python -m pytest"]

    ci = [re.sub(r"\s+#.*$", "", line).strip()
          for line in (REPO / ".ci" / "run").read_text().splitlines()]
    ci = [c for c in ci if c and not c.startswith("#")]
    norm = [re.sub(r" --quiet| --upgrade", "", c).replace("python -m pip", "pip") for c in ci]
    at = [norm.index(VENV_PREFIX[0]), norm.index(VENV_PREFIX[1]),
          norm.index(VENV_PREFIX[2]), norm.index("run_pytest")]
    assert at == sorted(at), ".ci/run must make the venv, activate it, install, then run the tests"
    # run_pytest is `python -m pytest "$@"` with exit 5 (nothing collected) made a failure
    assert re.search(r'run_pytest\(\)\s*\{[^}]*python -m pytest "\$@"[^}]*-eq 5[^}]*return 1',
                     (REPO / ".ci" / "run").read_text())
    assert any(c.startswith("run_pytest claims/ ") and "--dumpref-check=writeup.md" in c for c in norm)
    assert any(c.startswith("run_pytest benchmarks/") for c in norm)


# ---- A claim is a test ---------------------------------------------------------------------

def test_the_claim_example_is_a_claim_that_renders_and_checks(pytester):
    """The example, pasted as claims/test_softmax.py into a project whose [tool.dumpref] has the
    section `fusion` (its first line says so): rendered, it is one established claim with its
    numbers; checked against that write-up, it reproduces."""
    code = block("A claim is a test", "python").text
    first = code.splitlines()[0]
    assert first.startswith("# claims/test_softmax.py"), first
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["fusion"]\n')
    pytester.mkdir("claims")
    (pytester.path / "claims" / "test_softmax.py").write_text(code)
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    md = (pytester.path / "writeup.md").read_text()
    sentence = re.search(r'@pytest.mark.claim\("([^"]+)"\)', code).group(1)
    assert sentence in md
    assert "1 claims established" in md or "1 claim established" in md
    # the byte counts differ between jaxlib versions (0.9 splits the row reductions); that
    # they are in the write-up, whole, is what the example promises
    for row in ("bytes read and written, fused", "bytes read and written, unfused"):
        assert re.search(rf"\| {row} \| \d{{1,3}}(,\d{{3}})+ B", md), f"{row} is not in the write-up"
    check = pytester.runpytest("claims/", "--dumpref-check=writeup.md", "-p", "no:cacheprovider")
    check.assert_outcomes(passed=1)


# ---- On a TPU ------------------------------------------------------------------------------

@pytest.mark.tpu
def test_the_tpu_example_renders_and_checks_on_a_tpu(pytester):
    """The TPU example as claims/test_softmax_tpu.py (its first line says so), with the section's
    commands: rendered on the chip it is measured live and recorded; checked there live, and
    checked again replayed from its recording (--dumpref-record=none, as CI replays it), every
    line reproduces; recorded again with --dumpref-record=all."""
    code = block("On a TPU", "python").text
    assert code.splitlines()[0].startswith("# claims/test_softmax_tpu.py"), code.splitlines()[0]
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["fusion"]\n')
    pytester.mkdir("claims")
    (pytester.path / "claims" / "test_softmax_tpu.py").write_text(code)
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    md = (pytester.path / "writeup.md").read_text()
    assert "| HBM bytes, fused | 1,073,742,336 B |" in md, md
    assert list((pytester.path / "recordings").rglob("*.tar.xz"))
    lines = [c.split() for c in commands(block("On a TPU", "sh").text)]
    assert [c[3:] for c in lines] == [["--dumpref-report=writeup.md"],
                                         ["--dumpref-report=writeup.md", "--dumpref-record=all"],
                                         ["--dumpref-check=writeup.md"]]
    for mode in ("once", "none"):   # live on the chip, then replayed from the recording
        check = pytester.runpytest("claims/", "--dumpref-check=writeup.md", f"--dumpref-record={mode}",
                                   "-p", "no:cacheprovider")
        assert check.ret == 0, check.stdout.str()
    again = pytester.runpytest(*lines[1][3:], "claims/", "-p", "no:cacheprovider")
    again.assert_outcomes(passed=1)


# ---- Measured values -----------------------------------------------------------------------

def test_the_timing_example_renders_and_checks(pytester):
    """The timing example, as claims/test_scale.py (its first line says so) in a project with no
    configuration: rendered, its numbers carry their noise; checked against that write-up, it
    reproduces (directly, or after the fresh-process re-runs an inconclusive value gets)."""
    code = block("Measured values", "python").text
    first = code.splitlines()[0]
    assert first.startswith("# claims/test_scale.py"), first
    pytester.mkdir("claims")
    (pytester.path / "claims" / "test_scale.py").write_text(code)
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    md = (pytester.path / "writeup.md").read_text()
    assert re.search(r"\| extra time per call \| [\d.,]+ ± [\d.,e+-]+ us \| measured \(± its noise\) \|", md), md
    assert "| unfused | " in md and "| fused, compiled again (A/A) | " in md
    check = pytester.runpytest("claims/", "--dumpref-check=writeup.md", "-p", "no:cacheprovider")
    assert check.ret == 0, check.stdout.str()


# ---- Evidence kinds ------------------------------------------------------------------------

def test_the_kind_of_your_own_renders_and_checks(pytester, monkeypatch):
    """The two blocks as conftest.py and claims/test_quote.py (their first lines say so): the
    claim records a quote, the write-up shows it as the kind renders it, a check reproduces it
    and fails once the quote is edited by hand."""
    from pytest_dumpref import kinds
    monkeypatch.setattr(kinds, "KINDS", dict(kinds.KINDS))  # in-process runs: leave no kind behind
    conftest, claim = block("Evidence kinds", "python", 0).text, block("Evidence kinds", "python", 1).text
    assert conftest.startswith("# conftest.py") and claim.startswith("# claims/test_quote.py")
    (pytester.path / "conftest.py").write_text(conftest)
    pytester.mkdir("claims")
    (pytester.path / "claims" / "test_quote.py").write_text(claim)
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    md = (pytester.path / "writeup.md").read_text()
    quote = "> Fusion: a fused computation (XLA operation semantics)"
    assert f"\n{quote}\n" in md, md
    check = pytester.runpytest("claims/", "--dumpref-check=writeup.md", "-p", "no:cacheprovider")
    assert check.ret == 0, check.stdout.str()
    (pytester.path / "writeup.md").write_text(md.replace(quote, quote.replace("Fusion", "Fission")))
    check = pytester.runpytest("claims/", "--dumpref-check=writeup.md", "-p", "no:cacheprovider")
    assert check.ret == 1 and "Fission" in check.stdout.str(), check.stdout.str()


# ---- Configuration -------------------------------------------------------------------------

def test_the_configuration_example_shapes_the_writeup(pytester):
    """The TOML block as a project's pyproject.toml: its title, intro, intro file, section
    order, section title and intro land in the write-up, and the rule a measured number is
    judged by states the [tool.dumpref.measured] constants."""
    toml = block("Configuration", "toml").text
    cfg = tomllib.loads(toml)["tool"]["dumpref"]
    pytester.makepyprojecttoml(toml)
    pytester.mkdir("claims")
    (pytester.path / cfg["intro_file"]).write_text("A reading guide from the intro file.\n")
    (pytester.path / "claims" / "test_two.py").write_text('''
import pytest

@pytest.mark.claim("The passes claim.", section="passes")
@pytest.mark.provenance(dtype="f32", shapes={"x": (2,)}, method="arithmetic")
def test_passes(evidence):
    evidence.number("a time", 2.0, unit="ms", noise=0.1)
    assert 1 + 1 == 2

@pytest.mark.claim("The pjrt claim.", section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (2,)}, method="arithmetic")
def test_pjrt(evidence):
    evidence.number("a count", 3)
    assert 3 > 2
''')
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
    md = (pytester.path / "writeup.md").read_text()
    assert md.startswith(f"# {cfg['title']}\n")
    for text in (cfg["intro"], "A reading guide from the intro file.", cfg.get("setup", ""),
                 cfg["section_titles"]["passes"], cfg["section_intros"]["passes"]):
        assert text in md, f"{text!r} is not in the write-up"
    # sections in the configured order: pjrt before passes
    assert md.index("The pjrt claim.") < md.index("The passes claim.")
    measured = cfg["measured"]
    assert f"within {measured['sigmas']:g} combined sigmas" in md and f"a further {measured['floor']:.0%}" in md
    assert f"re-run in a fresh process (up to {measured['reruns']} times)" in md
    assert "| a time | 2 ± 0.1 ms | measured (± its noise) |" in md


# ---- Command line --------------------------------------------------------------------------

def _dump_as_the_readme_says(tmp_path: Path, program: str = "softmax") -> Path:
    """A dump folder written the way the README's `tour` paragraph says: XLA_FLAGS with the
    folder and the pass regex, in a plain jax process, of one of pytest_dumpref.examples."""
    text = section("Command line")
    m = re.search(r'XLA_FLAGS="([^"]+)"', text)
    assert m, "the Command line section no longer says how to write a dump folder"
    folder = tmp_path / "dump"
    flags = m.group(1).replace("DIR", str(folder))
    prog = ("import jax, jax.numpy as jnp\n"
            f"from pytest_dumpref.examples import {program}\n"
            f"jax.jit({program})(jnp.ones((64, 128), jnp.float32)).block_until_ready()\n")
    r = run([sys.executable, "-c", prog], tmp_path, clean_env(XLA_FLAGS=flags))
    assert r.returncode == 0, r.stderr[-2000:]
    assert any(folder.glob(f"*jit_{program}*.before_optimizations.txt")), list(folder.iterdir())[:5]
    return folder


def _concrete(line: str, values: dict, *, with_options: bool) -> list[str]:
    """A synopsis line made runnable: placeholders replaced, each ``[--opt VALUE]`` kept (with
    its value filled) or dropped."""
    def option(m):
        return " " + m.group(1) if with_options else ""
    line = re.sub(r"\s*\[([^\]]+)\]", option, line)
    return [values.get(word, word) for word in shlex.split(line)]


COST = "The kernel cost model: calibrate and cost"          # the heading as GitHub's parser gives it
COST_SECTION = "The kernel cost model: `calibrate` and `cost`"  # and as the README writes it


def _dump_as_the_cost_section_says(tmp_path: Path, source: str) -> Path:
    """The cost section's first line run as written, ``your_program.py`` being ``source``: a
    plain jax process with the XLA_FLAGS it names and nothing else.  Returns the dump folder."""
    line = commands(block(COST, "sh").text)[0]
    folder = tmp_path / "dump"
    env_word, *argv = shlex.split(line.replace("DIR", str(folder)))
    name, _, value = env_word.partition("=")
    assert name == "XLA_FLAGS" and argv == ["python", "your_program.py"], line
    (tmp_path / "your_program.py").write_text(source)
    r = run([sys.executable, "your_program.py"], tmp_path, clean_env(XLA_FLAGS=value))
    assert r.returncode == 0, r.stderr[-2000:]
    return folder


def jax_version() -> tuple:
    import jax
    return tuple(int(x) for x in jax.__version__.split(".")[:2])


def test_the_cost_model_commands_as_written(tmp_path):
    """The dump line as written (``XLA_FLAGS=--xla_dump_to=DIR`` and nothing more) writes every
    file the section says cost reads: the optimized module, the -buffer-assignment.txt beside it
    and its kernel's optimized IR, named as the section names it (which cost reads to find scalar
    loops); calibrate, with its options, writes rates; cost prices the dump folder (each of its
    modules, sorted) and a file of it with them, one kernel a row with its regime, and its --json
    says the same with the dispatch it charged."""
    lines = commands(block(COST, "sh").text)
    assert len(lines) == 3 and lines[0].startswith("XLA_FLAGS=") and "calibrate" in lines[1] \
        and " cost " in lines[2], lines
    # gelu: elementwise, priced on every jaxlib (0.9's softmax reduces rows with a
    # reduce-window, which the model refuses by name: no measured rate for it)
    folder = _dump_as_the_cost_section_says(tmp_path, (
        "import jax, jax.numpy as jnp\nfrom pytest_dumpref.examples import gelu\n"
        "jax.jit(gelu)(jnp.ones((64, 128), jnp.float32)).block_until_ready()\n"))
    optimized = sorted(folder.glob("*jit_gelu*.cpu_after_optimizations.txt"))
    assert len(optimized) == 1, sorted(p.name for p in folder.iterdir())
    module = optimized[0].name[:-len(".cpu_after_optimizations.txt")]
    assert (folder / f"{module}.cpu_after_optimizations-buffer-assignment.txt").is_file()
    if list(folder.glob("*.ir-with-opt.ll")):
        assert list(folder.glob(f"{module}.*_kernel_module.ir-with-opt.ll")), sorted(p.name for p in folder.iterdir())
    else:   # as the section says of jaxlib 0.12: object files, no IR
        assert jax_version() >= (0, 12) and list(folder.glob(f"{module}.obj-file.*_kernel_module.o")), \
            sorted(p.name for p in folder.iterdir())
    text = section(COST_SECTION)
    assert "`DIR/module_NNNN.<name>.cpu_after_optimizations.txt`" in text
    assert "`<module>.<kernel>_kernel_module.ir-with-opt.ll`;" in text
    assert " ".join("jaxlib 0.12's XLA writes only the kernels' object files, which `cost` disassembles".split()) \
        in " ".join(text.split())
    # the object files are there on every jaxlib, named as kernel_code reads them
    from pytest_dumpref.xla.cpu import kernel_code
    assert kernel_code.kernel_objects(optimized[0]), sorted(p.name for p in folder.iterdir())
    rates = tmp_path / "rates.json"
    cal = _concrete(lines[1], {"FILE": str(rates), "N": "3"}, with_options=True)
    r = run([sys.executable, *cal[1:]], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(rates.read_text())
    every = sorted(str(p) for p in folder.glob("*.cpu_after_optimizations.txt"))
    for path, files in ((str(folder), every), (str(optimized[0]), [str(optimized[0])])):
        cost = _concrete(lines[2], {"PATH...": path, "FILE": str(rates)}, with_options=True)
        r = run([sys.executable, *cost[1:]], tmp_path, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out = [json.loads(line) for line in r.stdout.strip().splitlines()]
        assert [o["file"] for o in out] == files
        gelu = out[-1]
        assert gelu["kernels"] and all("regime" in k for k in gelu["kernels"]) and "total us" in gelu
        assert gelu["dispatch"] in ("inline", "worker thread") and gelu["flops"] > 0


def test_the_cost_section_says_what_cost_predicts_and_prints(tmp_path):
    """What the section says of cost's numbers is what cost does: the time it predicts is
    timing.py's (pinned, XLA single-threaded with timing's own flag), the dispatch it charges
    is named by the words cost prints, below the threshold cost_model uses, and the regime of
    a one-op tanh kernel (jnp.tanh over f32[1024, 1024], priced at its one-op rate) is the
    label cost prints for it."""
    from pytest_dumpref import timing
    from pytest_dumpref.xla.cpu import calibrate, cost_model
    text = " ".join(section(COST_SECTION).split())
    assert "pinned to one core" in text and "XLA single-threaded" in text, text[:300]
    assert all(f"`{flag}`" in text for flag in timing.SINGLE_THREAD_XLA_FLAGS)
    assert f"fewer than {cost_model.ASYNC_MIN_OPS:,} flops" in text
    assert "(`inline`)" in text and "(`worker thread`)" in text
    folder = _dump_as_the_cost_section_says(tmp_path, (
        "import jax, jax.numpy as jnp\n"
        "jax.jit(jnp.tanh)(jnp.ones((1024, 1024), jnp.float32)).block_until_ready()\n"))
    (module,) = folder.glob("*jit_tanh.cpu_after_optimizations.txt")
    rates = cost_model.Rates(dispatch_inline_s=5e-6, dispatch_async_s=15e-6, launch_s=1e-6,
                             curve=[(2 ** 20, 1e-12), (2 ** 30, 1e-12)], cold_s_per_byte=1e-12, fault_s=1e-6,
                             compute={c: 1e-12 for c in cost_model.OP_CLASSES})
    rates.compute[cost_model.alone("tanh")] = 1e-9      # the one-op tanh's rate: what bounds it
    calibrate.save(rates, tmp_path / "rates.json")
    r = run([sys.executable, "-m", "pytest_dumpref", "cost", str(module), "--rates", "rates.json", "--json"],
            tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (kernel,) = json.loads(r.stdout)["kernels"]
    assert abs(kernel["compute us"] / (1024 * 1024 * 1e-9 * 1e6) - 1) < 1e-9     # at the one-op rate
    assert f"priced at `{cost_model.alone('tanh')}`, prints" in text
    assert f"prints `{kernel['regime']}`" in text, kernel["regime"]


def test_the_command_line_as_written(tmp_path):
    """Every line of the block, run twice (without its optional flags and with all of them,
    placeholders filled in) on a dump written as the block's paragraph says; each exits 0, each
    --json prints JSON, build-plugin prints the path of a library it built."""
    lines = commands(block("Command line", "sh").text)
    assert [shlex.split(x)[:4] for x in lines] and all(
        x.startswith("python -m pytest_dumpref ") for x in lines), lines
    folder = _dump_as_the_readme_says(tmp_path)
    optimized = sorted(folder.glob("*jit_softmax*.cpu_after_optimizations.txt"))[0]
    values = {"FILE": str(optimized), "FILE...": str(optimized), "NAME": "jit_softmax", "N": "2",
              "python": sys.executable}
    seen = set()
    for line in lines:
        sub = shlex.split(line)[3]
        seen.add(sub)
        for with_options in (False, True):
            # DIR is the dump folder for tour, the output folder for build-plugin
            out = str(tmp_path / "plugin-True") if sub == "build-plugin" else str(folder)
            args = _concrete(line, {**values, "DIR": out}, with_options=with_options)
            r = run(args, tmp_path, timeout=300)
            assert r.returncode == 0, f"{' '.join(args)} exited {r.returncode}:\n{r.stderr[-3000:]}"
            if "--json" in args:
                out = json.loads(r.stdout)
                if sub == "tour":  # every ranked pass has XLA's figures, not an error
                    errors = [(m.get("name"), p["pass"], p["xla"]["error"])
                              for m in out["modules"] for p in m.get("passes", [])
                              if "error" in p.get("xla", {})]
                    assert not errors, errors
                if sub == "fusion":  # the softmax's decisions, each with the compiler's verdict
                    decisions = [d for m in out["modules"] for d in m["decisions"]]
                    assert decisions and all(d["compiler"] for d in decisions), out
            elif sub == "build-plugin":
                lib = Path(r.stdout.strip().splitlines()[-1])
                assert lib.is_file() and lib.suffix == ".so", r.stdout
                if with_options:
                    assert lib.parent == tmp_path / "plugin-True", lib
            else:
                assert r.stdout.strip(), f"{' '.join(args)} printed nothing"
    assert seen == {"tour", "traffic", "fusion", "build-plugin"}, seen


# ---- Benchmarks ----------------------------------------------------------------------------

def test_the_benchmark_commands_select_benchmarks():
    """Collected, not run: each line, with --collect-only, is accepted and selects tests (a run
    of benchmarks/ takes minutes; CI runs `benchmarks/` as a smoke run)."""
    for line in commands(block("Benchmarks", "sh").text):
        args = shlex.split(line)
        assert args[:3] == ["python", "-m", "pytest"], line
        r = run([sys.executable, *args[1:], "--collect-only", "-q", "-p", "no:cacheprovider"],
                REPO, timeout=300)
        assert r.returncode == 0, f"{line} --collect-only exited {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
        m = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", r.stdout)
        assert m and int(m.group(1)) > 0, f"{line} selects no tests:\n{r.stdout[-1500:]}"


# ---- The dumpref PJRT device ---------------------------------------------------------------

def test_the_device_examples_run_and_print_what_they_say(tmp_path):
    """Each block run as the section says (`DUMPREF_PJRT=1 python example.py`) in a fresh
    process; a print line's trailing comment is what it must print.  Without DUMPREF_PJRT=1,
    the first block fails: the device is opt-in, as the section says."""
    text = section("The dumpref PJRT device")
    assert "DUMPREF_PJRT=1 python example.py" in text
    for n in (0, 1):
        code = block("The dumpref PJRT device", "python", n).text
        path = tmp_path / f"example{n}.py"
        path.write_text(code)
        r = run([sys.executable, str(path)], tmp_path, clean_env(DUMPREF_PJRT="1"), timeout=300)
        assert r.returncode == 0, f"block {n}:\n{r.stderr[-3000:]}"
        expected = [m.group(1).strip() for m in re.finditer(r"^\s*print\(.*\)\s+#\s?(.*)$", code, re.M)]
        printed = r.stdout.strip().splitlines()
        assert printed, f"block {n} printed nothing"
        if expected:
            assert printed[-len(expected):] == expected
        assert "DumprefDevice" in r.stdout
    r = run([sys.executable, str(tmp_path / "example0.py")], tmp_path, timeout=300)
    assert r.returncode != 0 and "dumpref" in r.stderr, "without DUMPREF_PJRT=1 the device was there"


# ---- Layout --------------------------------------------------------------------------------

def test_the_layout_names_what_is_there():
    """Every file and folder the layout names exists where it says."""
    parents: list = []
    named = []
    for line in block("Layout", "").text.splitlines():
        m = re.match(r"^( *)(\S+)", line)
        if not m or m.group(2) == "#":  # a comment line names a group of rooms
            continue
        depth = len(m.group(1)) // 2
        parents[depth:] = [m.group(2).rstrip("/")]
        named.append(Path(*parents))
    assert len(named) > 5, named
    missing = [str(p) for p in named if not (REPO / p).exists()]
    assert not missing, f"README's Layout names paths that do not exist: {missing}"


# ---- the jax range -------------------------------------------------------------------------

def test_the_jax_range_the_readme_states_is_pyprojects_and_holds_here():
    """The README's 'from A to B' is pyproject's jax and jaxlib range, .ci/run tests its lower
    end, and the jax this suite runs under lies inside it."""
    import jax
    import jaxlib
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = {}
    for d in deps:
        m = re.fullmatch(r"(jax|jaxlib)>=([0-9.]+),<=([0-9.]+)", d.replace(" ", ""))
        if m:
            ranges[m.group(1)] = (m.group(2), m.group(3))
    assert set(ranges) == {"jax", "jaxlib"} and ranges["jax"] == ranges["jaxlib"], deps
    low, high = ranges["jax"]
    assert f"any jax and jaxlib from {low} to {high}" in " ".join(section("Quick start").split())
    assert 'jax==$oldest' in (REPO / ".ci" / "run").read_text()

    def version(v):
        return tuple(int(x) for x in v.split(".")[:3])
    for mod in (jax, jaxlib):
        assert version(low) <= version(mod.__version__) <= version(high), mod.__version__


# ---- A write-up of your own ----------------------------------------------------------------

def test_init_then_render_then_check_as_written(tmp_path):
    """The block as one shell session in an empty folder (its cd carries over to the third
    line), with this suite's Python as `python`: init writes its three files, the render
    establishes the example claim and the check re-proves it."""
    lines = commands(block("A write-up of your own: init, the API reference, CI", "sh").text)
    assert len(lines) == 3 and lines[0].startswith("python -m pytest_dumpref init "), lines
    script = "set -e\n" + "\n".join(lines) + "\n"
    env = clean_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    r = run(["bash", "--noprofile", "--norc", "-c", script], tmp_path, env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    folder = tmp_path / shlex.split(lines[0])[-1]
    for rel in ("pyproject.toml", "claims/test_my_program.py", ".github/workflows/dumpref.yml", "writeup.md"):
        assert (folder / rel).is_file(), rel
    assert "1 claim established" in (folder / "writeup.md").read_text()
    assert "every line of writeup.md reproduces" in r.stdout
    text = " ".join(section("A write-up of your own: `init`, the API reference, CI").split())
    for path in ("docs/api.md", "docs/ci/dumpref.yml", "tests/core/test_ci_workflow.py"):
        assert f"({path})" in text or f"`{path}`" in text, path
        assert (REPO / path).is_file(), path
    assert "len(d.fusion_kernels)" in text


def test_the_kernel_perf_example_says_where_the_model_misses(tmp_path):
    """The kernel_perf example as a script of its own: one run of gelu fused and unfused beside
    the calibration kernels, sampled by perf, prints where the cost model misses the extra
    time, one kernel group a line; where perf cannot sample, it says why and stops (so this
    test skips with perf's reason)."""
    import pytest
    from pytest_dumpref.xla.cpu import kernel_perf
    why = kernel_perf.perf_available()
    if why:
        pytest.skip(why)
    script = tmp_path / "miss.py"
    script.write_text(block(COST, "python").text)
    r = run([sys.executable, str(script)], tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.strip()]
    names = [line[:36].strip() for line in rows]
    misses = [float(line[36:].split()[0]) for line in rows]
    # every group once: the unfused program's one-op kernels, the fused one's kernel, the
    # library's and what runs outside the kernels
    assert len(set(names)) == len(names) and {"outside the kernels", "library kernels"} <= set(names), rows
    assert any(n.startswith("wrapped_") and n.endswith("(unfused)") for n in names), rows
    assert any(n.endswith("(fused)") for n in names), rows
    # largest first, as extra_time_miss orders them
    assert [abs(m) for m in misses] == sorted((abs(m) for m in misses), reverse=True), rows
