"""Claims about a chip you don't have: a claim marked platform(name) is measured and recorded
where jax's default backend is that platform, replayed from its recording elsewhere.  The
platform here is this machine's own (cpu in CI, tpu on a TPU), so that recording and replaying
both run wherever the suite does:
``--dumpref-record=none`` replays where the chip is.  A TPU claim replayed from a recording made
on the chip is the write-up's own (claims/test_passes_tpu.py)."""
import io
import json
import lzma
import tarfile

import jax
import pytest

from pytest_dumpref.recording import Recording, RecordingError, choose, path_for
from pytest_dumpref.xla.naming import BACKENDS

HERE = jax.default_backend()        # the platform this machine has: recorded here
ELSEWHERE = "tpu" if HERE != "tpu" else "cpu"   # one it has not

CLAIM = '''
import numpy as np
import pytest
from pytest_dumpref.examples import softmax

x = np.ones(SHAPE, np.float32)

@pytest.mark.fusion
@pytest.mark.platform("PLATFORM")
@pytest.mark.claim("Softmax without fusion moves more bytes")
@pytest.mark.provenance(dtype="f32", shapes={"x": SHAPE}, method="spill-style bytes of the optimized module")
def test_softmax_bytes(dump, unfused, evidence):
    fused = dump(softmax, x)
    plain = unfused(softmax, x, passes=["FUSION_PASS"])
    evidence.number("bytes, fused", fused.traffic, unit="B")
    evidence.number("bytes, unfused", plain.traffic, unit="B")
    assert plain.traffic > fused.traffic
    assert fused.compiled.cost_analysis()["bytes accessed"] > 0
'''
NODE = "claims/test_softmax.py::test_softmax_bytes"


def write_claim(pytester, shape=(256, 256), platform=HERE):
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["fusion"]\n')
    pytester.mkdir("claims") if not (pytester.path / "claims").exists() else None
    (pytester.path / "claims" / "test_softmax.py").write_text(
        CLAIM.replace("SHAPE", repr(shape)).replace("PLATFORM", platform)
        .replace("FUSION_PASS", BACKENDS[HERE].fusion_passes[0]))


def recording_of(pytester):
    return path_for(pytester.path / "recordings", NODE)


@pytest.fixture
def recorded(pytester):
    """A claim rendered where its platform is: measured live and recorded."""
    write_claim(pytester)
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    assert recording_of(pytester).is_file()
    return pytester


def test_recorded_where_the_chip_is_and_replayed_exactly(recorded):
    md = (recorded.path / "writeup.md").read_text()
    assert "| recordings/claims/test_softmax/test_softmax_bytes.tar.xz |" in md
    assert "measured live on the chip and recorded" in md
    rec = Recording.open(recording_of(recorded), NODE)
    assert rec.platform == HERE and len(rec.entries) == 3     # dump, unfused's reference, unfused
    # replayed: nothing compiled, every line of the write-up reproduces
    check = recorded.runpytest("claims/", "--dumpref-check=writeup.md", "--dumpref-record=none", "-p", "no:cacheprovider")
    assert check.ret == 0, check.stdout.str()
    assert "every line of writeup.md reproduces" in check.stdout.str()


def test_a_changed_shape_is_not_replayed_from_the_old_recording(recorded):
    write_claim(recorded, shape=(128, 256))
    res = recorded.runpytest("claims/", "--dumpref-record=none", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert NODE in out and "holds no compile of softmax" in out
    assert f"python -m pytest '{NODE}' --dumpref-record=all" in out


def test_a_deleted_recording_fails_naming_what_to_run(recorded):
    recording_of(recorded).unlink()
    write_claim(recorded, platform=ELSEWHERE)   # a chip this machine does not have
    res = recorded.runpytest("claims/", "-p", "no:cacheprovider")
    res.assert_outcomes(errors=1)      # at its fixtures' setup, before the claim's body runs
    out = res.stdout.str()
    assert f"needs evidence from {ELSEWHERE}" in out and "no recording" in out
    assert f"python -m pytest '{NODE}' --dumpref-record=once" in out


def _rewrite(path, edit):
    """The archive at ``path`` written again with ``edit(name, bytes) -> bytes`` applied to its
    members, as a hand editing a recorded dump would."""
    with tarfile.open(path, "r:xz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for m, blob in members:
            blob = edit(m.name, blob)
            m.size = len(blob)
            tar.addfile(m, io.BytesIO(blob))
    path.write_bytes(buf.getvalue())


def test_one_byte_of_a_recorded_dump_changed_fails_naming_the_file(recorded):
    path = recording_of(recorded)

    def edit(name, blob):
        if name.endswith("after_optimizations.txt") and name.startswith("0/"):
            assert b"exponential" in blob
            return blob.replace(b"exponential", b"exponentiaL", 1)
        return blob
    _rewrite(path, edit)
    res = recorded.runpytest("claims/", "--dumpref-record=none", "-p", "no:cacheprovider")
    res.assert_outcomes(errors=1)
    out = res.stdout.str()
    assert str(path) in out and "after_optimizations.txt was changed after it was recorded" in out


def test_a_truncated_recording_is_a_clear_error(recorded):
    path = recording_of(recorded)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RecordingError, match="not a whole recording"):
        Recording.open(path, NODE)


def test_a_recording_of_another_chip_is_refused(recorded):
    path = recording_of(recorded)

    def edit(name, blob):
        if name == "recording.json":
            index = json.loads(blob)
            index["chip"] = "TPU v4"
            return json.dumps(index).encode()
        return blob
    _rewrite(path, edit)
    claim = (recorded.path / "claims" / "test_softmax.py")
    claim.write_text(claim.read_text().replace('method="spill-style bytes of the optimized module"',
                                               'method="spill-style bytes of the optimized module", chip="TPU v5 lite"'))
    res = recorded.runpytest("claims/", "--dumpref-record=none", "-p", "no:cacheprovider")
    res.assert_outcomes(errors=1)
    assert "was made on 'TPU v4'" in res.stdout.str() and "declares chip 'TPU v5 lite'" in res.stdout.str()


def test_the_modes(tmp_path):
    missing, there = tmp_path / "missing.tar.xz", tmp_path / "there.tar.xz"
    there.write_bytes(b"")
    assert choose(None, "tpu", "tpu", missing, "c") == "record"
    assert choose(None, "tpu", "tpu", there, "c") == "live"
    assert choose("all", "tpu", "tpu", there, "c") == "record"
    assert choose("none", "tpu", "tpu", there, "c") == "replay"
    assert choose(None, "tpu", "cpu", there, "c") == "replay"
    with pytest.raises(RecordingError, match="nothing can be recorded without the chip"):
        choose("all", "tpu", "cpu", there, "c")
    with pytest.raises(RecordingError, match="no recording"):
        choose("none", "tpu", "tpu", missing, "c")


def test_a_recording_is_xz_and_small(recorded):
    data = recording_of(recorded).read_bytes()
    assert lzma.decompress(data)[:0] == b"" and len(data) < 1024 * 1024
