"""pytest-dumpref: a pytest plugin where XLA dumps are the referee of a technical write-up's claims.

Each claim is a test (``@pytest.mark.claim("sentence")`` and ``@pytest.mark.provenance(...)``)
whose fixtures supply the evidence: ``dump`` and ``unfused`` (every-pass XLA dumps, as
:class:`pytest_dumpref.xla.dump.Dump`), ``timing`` (:class:`pytest_dumpref.timing.TimingResult`),
``pjrt_plugin`` (:class:`pytest_dumpref.pjrt.build.BuiltPlugin`) and ``evidence`` (what the
write-up shows).  ``pytest claims/ --dumpref-report=writeup.md`` renders the passing claims;
``pytest claims/ --dumpref-check=writeup.md`` re-proves the file line by line.

Example, a claim that counts the fusion kernels of a program::

    @pytest.mark.claim("my_program compiles to one fusion kernel.")
    @pytest.mark.provenance(dtype="f32", shapes={"x": (256, 256)}, method="fusion instructions")
    def test_one_kernel(dump, evidence):
        d = dump(my_program, x)
        evidence.number("fusion kernels", len(d.fusion_kernels))
        assert len(d.fusion_kernels) == 1

``python -m pytest_dumpref init [DIR]`` starts a project of your own ([tool.dumpref], one such
claim, a GitHub Actions workflow that runs ``--dumpref-check``; the recipe is
``docs/ci/dumpref.yml``).  The objects the fixtures return are documented, with examples the
test suite runs, in ``docs/api.md``; the command line (``tour``, ``traffic``, ``fusion``,
``build-plugin``, ``calibrate``, ``cost``, ``init``) in the README.
"""
