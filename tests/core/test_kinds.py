"""Evidence kinds are one seam: a kind unknown when a claim records it fails that claim, naming
it and the kind; a kind a project registers from its conftest.py is recorded, rendered, kept in
the write-up's data, read back and checked like the built-in ones."""
from __future__ import annotations

import pytest

from pytest_dumpref import kinds

pytest_plugins = ["pytester"]

PYPROJECT = '[tool.dumpref]\nsections = ["s"]\n'

CLAIM = '''
import pytest

@pytest.mark.s
@pytest.mark.claim("The docs say so.")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="quoted")
def test_quoted(evidence):
    evidence.quote("fusion saves *memory* traffic", source="the XLA docs")
    evidence.number("n", 1)
    assert True
'''

CONFTEST = '''
from pytest_dumpref import kinds

class Quote(kinds.Kind):
    name = "quote"
    key = "source"
    required = ("text", "source")

    def record(self, text, *, source):
        if not str(source).strip():
            raise kinds.ClaimError("evidence.quote: name the source")
        return {"text": str(text), "source": str(source)}

    def render(self, out, ctx, index):
        item = ctx.items[index]
        out.blank()
        out.add("> ", kinds.prose(item["text"]), " (", kinds.prose(item["source"]), ")")
        return 1

kinds.register(Quote())
'''


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
    """pytester runs in this process: a kind one test's conftest registers stays out of the next."""
    monkeypatch.setattr(kinds, "KINDS", dict(kinds.KINDS))


def _run(pytester, *args):
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_an_unknown_kind_fails_its_claim_at_record_time_naming_claim_and_kind(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_q=CLAIM)
    res = _run(pytester, "--dumpref-report=writeup.md")
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "UnknownKind: claim test_q.py::test_quoted: evidence of unknown kind 'quote'" in out, out
    assert "known kinds: number, excerpt, table, file, figure, note" in out


def test_a_kind_of_your_own_renders_and_checks_and_a_hand_edit_of_it_fails(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_q=CLAIM)
    _run(pytester, "--dumpref-report=writeup.md").assert_outcomes(passed=1)
    md = (pytester.path / "writeup.md").read_text()
    line = "> fusion saves \\*memory\\* traffic (the XLA docs)"
    assert f"\n\n{line}\n" in md, md
    check = _run(pytester, "--dumpref-check=writeup.md")
    assert check.ret == 0, check.stdout.str()
    assert "every line of writeup.md reproduces" in check.stdout.str()

    (pytester.path / "writeup.md").write_text(md.replace(line, line.replace("docs", "blog")))
    check = _run(pytester, "--dumpref-check=writeup.md")
    assert check.ret == 1
    assert f"the file says {line.replace('docs', 'blog')!r}" in check.stdout.str(), check.stdout.str()


def test_a_kind_validates_what_the_claim_passes(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_q=CLAIM.replace('source="the XLA docs"', 'source=" "'))
    res = _run(pytester, "--dumpref-report=writeup.md")
    res.assert_outcomes(failed=1)
    assert "evidence.quote: name the source" in res.stdout.str()


def test_a_write_up_whose_kind_is_no_longer_registered_says_so(pytester):
    """The write-up keeps the item; a check in a project that dropped the kind's conftest names
    the claim and the kind instead of failing somewhere in the renderer."""
    pytester.makepyprojecttoml(PYPROJECT)
    conftest = pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_q=CLAIM)
    _run(pytester, "--dumpref-report=writeup.md").assert_outcomes(passed=1)
    conftest.unlink()
    kinds.KINDS.pop("quote")
    check = _run(pytester, "--dumpref-check=writeup.md")
    assert check.ret != 0
    assert "claim test_q.py::test_quoted: evidence of unknown kind 'quote'" in check.stdout.str() + check.stderr.str()


def test_a_kind_cannot_take_a_built_in_name_or_an_attribute_of_evidence():
    class Number(kinds.Kind):
        name = "number"
    with pytest.raises(ValueError, match="'number' is registered already"):
        kinds.register(Number())

    class Record(kinds.Kind):
        name = "record"
    with pytest.raises(ValueError, match="must be an identifier"):
        kinds.register(Record())


def test_an_item_that_does_not_travel_as_json_is_refused_when_recorded():
    class Raw(kinds.Kind):
        name = "raw"

        def record(self, value):
            return {"value": value}
    kinds.register(Raw())
    from pytest_dumpref.claims import Evidence
    e = Evidence()
    e.claim = "t.py::test_x"
    with pytest.raises(kinds.ClaimError, match=r"claim t.py::test_x: evidence.raw: the item it records does not travel as JSON"):
        e.raw(object())
    assert e.items == []


LISTING_CLAIM = '''
import pytest

MODULE = "".join(f"def f{i}(x):\\n    return x + {i}\\n\\n" for i in range(1000))

@pytest.mark.s
@pytest.mark.claim("The module is listed whole.")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="listed")
def test_listed(evidence):
    evidence.excerpt("the module, whole (src/model.py)", MODULE, lang="python")
    evidence.excerpt("short.py: two lines", "a = 1\\nb = 2\\n", lang="python")
    evidence.excerpt("run.py: a script to save and run", "print(3 * 7)\\n", lang="python", beside=True)
    evidence.number("definitions", MODULE.count("def "))
    assert MODULE.count("def ") == 1000
'''


def test_a_long_excerpt_is_kept_beside_the_writeup_and_checked_byte_for_byte(pytester):
    """A listing too long for a page (over EXCERPT_KEPT_BESIDE bytes) is written beside the
    write-up under the file name its title starts with and linked with its sha256; a short one
    stays in the page, unless its claim keeps it beside.  The check fails, naming the file, when the kept file is edited or gone."""
    import hashlib
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_listed=LISTING_CLAIM)
    pytester.runpytest("--dumpref-report=w.md").assert_outcomes(passed=1)
    kept = pytester.path / "w.assets" / "test_listed" / "model.py"
    text = kept.read_text()
    assert text.count("def ") == 1000 and len(text.encode()) > kinds.EXCERPT_KEPT_BESIDE
    page = (pytester.path / "w.md").read_text()
    assert "def f999" not in page and "a = 1" in page
    assert "[`model.py`](w.assets/test_listed/model.py)" in page
    assert hashlib.sha256(text.encode()).hexdigest() in page
    # a short script the claim keeps beside (beside=True) is a file too, not lines of the page
    script = pytester.path / "w.assets" / "test_listed" / "run.py"
    assert script.read_text() == "print(3 * 7)\n" and "print(3 * 7)" not in page
    assert "[`run.py`](w.assets/test_listed/run.py), 1 line," in page
    pytester.runpytest("--dumpref-check=w.md").assert_outcomes(passed=1)

    kept.write_text(text.replace("return x + 7\n", "return x + 8\n"))
    res = pytester.runpytest("--dumpref-check=w.md")
    assert res.ret != 0
    assert "w.assets/test_listed/model.py differs from" in res.stdout.str()
    kept.unlink()
    res = pytester.runpytest("--dumpref-check=w.md")
    assert res.ret != 0
    assert "model.py is missing" in res.stdout.str()
