"""The program reader on its own (no PJRT): real artifacts captured from jax, read and run
through cffi; malformed and unsupported input answered with the right error code."""
from __future__ import annotations

import numpy as np
import pytest

import prog_artifacts as pa


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return pa.corpus(tmp_path_factory)


@pytest.fixture(scope="module")
def reader(folder):
    return pa.Reader(pa.build_prog_library(folder))


@pytest.mark.parametrize("case", pa.CORPUS_CASES)
def test_reader_runs_captured_artifact(reader, folder, case):
    data, ins, expected = pa.load_case(folder, case)
    assert data[:4] == b"ML\xefR" and b"StableHLO_v1.10.0" in data[:32]
    p, code, message = reader.parse(data)
    assert p is not None, (code, message)
    try:
        inputs, outputs = reader.signature(p)
        assert inputs == [(a.dtype.name, a.shape) for a in ins]
        assert outputs == [(a.dtype.name, a.shape) for a in expected]
        code, message, got = reader.run(p, ins)
        assert code == 0, message
        for g, e in zip(got, expected):
            if np.issubdtype(e.dtype, np.inexact) or e.dtype.name == "bfloat16":
                wide = np.complex128 if np.issubdtype(e.dtype, np.complexfloating) else np.float64
                scale = max(float(np.max(np.abs(e.astype(wide)))) if e.size else 0.0, 1e-30)
                tol = 1e-2 if e.dtype.name == "bfloat16" else 1e-5
                assert float(np.max(np.abs(g.astype(wide) - e.astype(wide)), initial=0)) <= tol * scale
            else:
                np.testing.assert_array_equal(g, e)
    finally:
        reader.free(p)


def test_every_truncation_is_invalid_argument(reader, folder):
    data, _, _ = pa.load_case(folder, "softmax")
    for n in range(len(data)):
        p, code, message = reader.parse(data[:n])
        assert p is None and code == pa.INVALID_ARGUMENT and message, (n, code, message)


def test_not_bytecode_is_invalid_argument(reader):
    for data in (b"", b"hello", b"\x00" * 64, b"HloModule m\nENTRY e { ROOT c = f32[] constant(1) }"):
        p, code, message = reader.parse(data)
        assert p is None and code == pa.INVALID_ARGUMENT
        assert "MLIR bytecode" in message


def test_unknown_bytecode_version_is_unimplemented(reader, folder):
    data, _, _ = pa.load_case(folder, "add_one")
    assert data[4] == 0x0D  # varint 6
    p, code, message = reader.parse(data[:4] + bytes([0x0F]) + data[5:])  # version 7
    assert p is None and code == pa.UNIMPLEMENTED and "version 7" in message


def test_unsupported_op_is_unimplemented_and_named(reader, folder):
    """Renaming an op in the string table (same length) makes it one the reader lacks."""
    data, _, _ = pa.load_case(folder, "softmax")
    name = next(n for n in (b"exponential_v2\x00", b"exponential_v1\x00") if n in data)
    p, code, message = reader.parse(data.replace(name, b"exponential_v9\x00"))
    assert p is None and code == pa.UNIMPLEMENTED
    assert "vhlo.exponential_v9" in message
