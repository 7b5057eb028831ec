"""DumpSession and the dump-folder reader, against real compiles."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_dumpref.claims import Evidence
from pytest_dumpref.examples import layernorm, softmax
from pytest_dumpref.xla.dump import MANIFEST, Dump, DumpError, DumpFolder, DumpSession

X = np.linspace(-1, 1, 64 * 128, dtype=np.float32).reshape(64, 128)


@pytest.fixture(scope="module")
def softmax_dump(tmp_path_factory):
    ev = Evidence()
    d = DumpSession(tmp_path_factory.mktemp("dumps"), ev).dump(softmax, X)
    return d, ev


def test_snapshots_are_the_folder_in_step_order(softmax_dump):
    d, _ = softmax_dump
    on_disk = sorted(p.name for p in d.folder.iterdir()
                     if p.name.startswith("module_") and p.name.split(".")[2].isdigit())
    assert [s.path.name for s in d.snapshots] == on_disk  # 4-digit steps sort as numbers
    assert [s.step for s in d.snapshots] == list(range(len(d.snapshots)))
    first = d.snapshots[0]
    assert first.after == "pipeline-start" and first.before
    fusion = [s for s in d.snapshots if s.after == "fusion"]
    assert len(fusion) == 1 and fusion[0].pipeline == "HLO_passes_after_layout_assignment"
    assert fusion[0].before == "fusion-wrapper"
    # copy-insertion writes mid-pass snapshots with no "before_"
    assert any(s.pipeline == "copy-insertion" and s.before is None for s in d.snapshots)
    d.check_complete()


def test_dump_exposes_modules_reports_and_params(softmax_dump):
    d, ev = softmax_dump
    assert d.before_optimizations.entry.parameters[0].shape.dims == (64, 128)
    assert any(i.opcode == "fusion" for i in d.optimized.entry.instructions)
    assert "allocation" in d.buffer_assignment.lower()
    assert d.memory_usage_report.strip()
    assert d.params == {"x": ("float32", (64, 128))}
    assert d.options == {"xla_dump_hlo_pass_re": ".*"}
    out = np.asarray(d.compiled(X))
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-5)
    # evidence recorded by the session itself
    files = [i for i in ev.items if i["kind"] == "file"]
    assert files and files[0]["title"] == "XLA dump of softmax" and files[0]["path"].endswith(MANIFEST)
    assert ev.observed["backends"] == ["cpu"]
    assert ev.observed["params"] == {"x": ("f32", (64, 128))}


def test_pytree_params_are_named_by_argument_and_path(tmp_path):
    g, b = np.ones(128, np.float32), np.zeros(128, np.float32)
    d = DumpSession(tmp_path).dump(lambda x, p: layernorm(x, p["g"], p["b"]), X, {"g": g, "b": b})
    assert d.params == {"x": ("float32", (64, 128)), "p['b']": ("float32", (128,)),
                        "p['g']": ("float32", (128,))}


_SUBPROCESS = textwrap.dedent("""
    import sys, numpy as np, jax.numpy as jnp
    from pathlib import Path
    from pytest_dumpref.examples import softmax
    from pytest_dumpref.xla.dump import DumpSession
    # More compiles first than the parent made before its dump, so that this process's module
    # number is larger than the parent's whatever order the tests ran in.
    for n in range(int(sys.argv[2]) + 1):
        jnp.ones(n + 1) + 1
    X = np.linspace(-1, 1, 64 * 128, dtype=np.float32).reshape(64, 128)
    DumpSession(Path(sys.argv[1])).dump(softmax, X)
""")


def test_manifest_is_identical_across_compiles_and_processes(softmax_dump, tmp_path):
    """What claims hash must not depend on the process: module numbers, dump paths and
    source locations are left out of the manifest."""
    d, _ = softmax_dump
    again = DumpSession(tmp_path / "same").dump(softmax, X)
    mine = (d.folder / MANIFEST).read_text()
    assert (again.folder / MANIFEST).read_text() == mine
    parent_number = min(int(p.name.split(".")[0][len("module_"):])
                        for p in d.folder.iterdir() if p.name.startswith("module_"))
    subprocess.run([sys.executable, "-c", _SUBPROCESS, str(tmp_path / "sub"), str(parent_number)],
                   check=True, cwd=tmp_path, timeout=300)
    (sub,) = (tmp_path / "sub").iterdir()
    assert (sub / MANIFEST).read_text() == mine
    assert sorted(p.name for p in sub.iterdir() if p.name.startswith("module_")) != \
        sorted(p.name for p in d.folder.iterdir() if p.name.startswith("module_"))
    # and the files that are left out do differ between identical compiles
    dbg = [p for p in d.folder.iterdir() if p.name.endswith(".debug_options")]
    dbg2 = [p for p in again.folder.iterdir() if p.name.endswith(".debug_options")]
    assert dbg and dbg[0].read_bytes() != dbg2[0].read_bytes()


def test_unfused_refuses_a_misspelt_pass(tmp_path):
    with pytest.raises(DumpError, match=r"pass 'fusoin' never ran when compiling softmax.*did you mean 'fusion'"):
        DumpSession(tmp_path).unfused(softmax, X, passes=["fusoin"])


def test_unfused_refuses_a_pass_that_changed_nothing(tmp_path):
    with pytest.raises(DumpError, match=r"disabling cse left the optimized module of softmax unchanged"):
        DumpSession(tmp_path).unfused(softmax, X, passes=["cse"])


def test_unfused_disables_the_fusion_passes(tmp_path):
    ev = Evidence()
    passes = ["fusion", "fusion-wrapper", "dot-library-rewriter"]
    d = DumpSession(tmp_path, ev).unfused(softmax, X, passes=passes)
    # no kernel holds more than one operation: jaxlib 0.9 to 0.11 leave no fusion at all;
    # 0.12 still wraps each leftover operation in a fusion of its own (wrapped_<op>) in a step
    # after the pass pipeline, which xla_disable_hlo_passes=fusion-wrapper does not reach
    for i in d.optimized.entry.instructions:
        if i.opcode == "fusion":
            body = d.optimized.computations[i.called[0]].instructions
            assert i.name.startswith("wrapped_"), i.line
            assert len([b for b in body if b.opcode != "parameter"]) == 1, i.line
    assert d.options["xla_disable_hlo_passes"] == ",".join(passes)
    assert not any(s.after in passes for s in d.snapshots)
    assert [i["title"] for i in ev.items if i["kind"] == "file"] == [
        "XLA dump of softmax without fusion,fusion-wrapper,dot-library-rewriter"]


# ---- reading folders made anywhere -------------------------------------------------------

def _copy(src: Path, dst: Path, skip=lambda name: False, edit=None) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        if p.is_file() and not skip(p.name):
            data = p.read_bytes()
            if edit:
                data = edit(p.name, data)
            (dst / p.name).write_bytes(data)
    return dst


def test_folder_without_dumps_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DumpError, match=rf"{tmp_path}: no XLA module dumps"):
        DumpFolder(tmp_path)


def test_missing_snapshot_is_named(softmax_dump, tmp_path):
    d, _ = softmax_dump
    gone = d.snapshots[3].path.name
    f = _copy(d.folder, tmp_path / "f", skip=lambda n: n == gone)
    with pytest.raises(DumpError, match=r"jit_softmax is missing pass snapshot step\(s\) 0003"):
        Dump.from_folder(f).check_complete()


def test_truncated_snapshot_is_named(softmax_dump, tmp_path):
    d, _ = softmax_dump
    victim = d.snapshots[5].path.name
    half = lambda b: b[: b.rindex(b"\n", 0, len(b) // 2) + 1]  # noqa: E731 (cut at a line end)
    f = _copy(d.folder, tmp_path / "f", edit=lambda n, b: half(b) if n == victim else b)
    dd = Dump.from_folder(f)
    with pytest.raises(DumpError, match=rf"{victim}.*truncated"):
        dd.snapshots[5].module
    # cut inside a line: still an error naming the file
    f2 = _copy(d.folder, tmp_path / "f2", edit=lambda n, b: b[: len(b) // 2 + 7] if n == victim else b)
    with pytest.raises(DumpError, match=rf"{victim}"):
        Dump.from_folder(f2).snapshots[5].module


def test_non_hlo_file_is_named(softmax_dump, tmp_path):
    d, _ = softmax_dump
    victim = d.files.optimized.name
    f = _copy(d.folder, tmp_path / "f", edit=lambda n, b: b"\x89PNG\x00\xff" if n == victim else b)
    with pytest.raises(DumpError, match=rf"{victim}: not HLO text"):
        Dump.from_folder(f).optimized


def test_folder_with_two_modules_lists_them(tmp_path):
    s = DumpSession(tmp_path)
    a = s.dump(softmax, X)
    b = s.dump(lambda x: x * 2.0, X)
    f = _copy(a.folder, tmp_path / "both")
    for p in b.folder.iterdir():
        (f / p.name).write_bytes(p.read_bytes())
    folder = DumpFolder(f)
    # listed by module number: softmax was compiled first in this process
    assert [m.name for m in folder.modules] == [a.name, b.name]
    with pytest.raises(DumpError, match="holds 2 modules"):
        Dump.from_folder(f)
    assert Dump.from_folder(f, module="jit_softmax").name == "jit_softmax"
    with pytest.raises(DumpError, match="no module 'jit_nothing'"):
        Dump.from_folder(f, module="jit_nothing")


def test_process_counted_pass_names_are_shown_as_n_in_the_manifest():
    """jaxlib 0.12 numbers apply-xla-transforms passes across the process; the manifest
    shows the number as N (a name without a counter, as 0.9 to 0.11 write, is kept)."""
    from pytest_dumpref.xla.dump import stable_file_name
    a = "jit_f.0020.HLO_passes_after_scheduling.after_pipeline-start.before_apply-xla-transforms-1.txt"
    b = "jit_f.0020.HLO_passes_after_scheduling.after_pipeline-start.before_apply-xla-transforms-5.txt"
    assert stable_file_name(a) == stable_file_name(b) != a
    assert stable_file_name("jit_f.0021.p.after_apply-xla-transforms-14.before_dce.txt") == \
        "jit_f.0021.p.after_apply-xla-transforms-N.before_dce.txt"
    old = "jit_f.0019.HLO_passes_after_scheduling.after_pipeline-start.before_apply-xla-transforms.txt"
    assert stable_file_name(old) == old
