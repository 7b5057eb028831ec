"""Robustness of the program reader: mutated and truncated artifacts from real jax programs.

Every input must give a program or an error with a known code; programs that parse are run
on zero inputs.  Bounded in time: a few seconds through cffi in this process, a few seconds of
a C driver built with AddressSanitizer + UBSan (leaks included), in a subprocess."""
from __future__ import annotations

import random
import subprocess
import time

import numpy as np
import pytest

import prog_artifacts as pa


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return pa.corpus(tmp_path_factory)


def mutants(seed, corpus, count):
    rng = random.Random(seed)
    for _ in range(count):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(4)
            if kind == 0:
                del data[rng.randrange(len(data) + 1):]
            elif kind == 1 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind == 2 and data:
                at = rng.randrange(len(data))
                del data[at:at + rng.randint(1, 16)]
            elif data:
                other = rng.choice(corpus)
                at, src = rng.randrange(len(data)), rng.randrange(len(other))
                data[at:at] = other[src:src + rng.randint(1, 32)]
        yield bytes(data)


def test_fuzz_through_cffi(folder):
    reader = pa.Reader(pa.build_prog_library(folder))
    reader.lib.prog_set_loop_limit(1000)  # a mutated loop bound must not hang the fuzzer
    corpus = [(folder / f"{c}.mlir").read_bytes() for c in pa.CORPUS_CASES]
    counts = {"parsed": 0, pa.INVALID_ARGUMENT: 0, pa.UNIMPLEMENTED: 0}
    deadline = time.monotonic() + 3.0
    for data in mutants(1234, corpus, 200000):
        if time.monotonic() > deadline:
            break
        p, code, message = reader.parse(data)
        if p is None:
            assert code in counts and message, (code, message)
            counts[code] += 1
            continue
        counts["parsed"] += 1
        inputs, outputs = reader.signature(p)
        if sum(int(np.prod(s)) for _, s in inputs + outputs) < 1 << 20:
            zeros = [np.zeros(s, np.dtype(t)) for t, s in inputs]
            code, message, _ = reader.run(p, zeros)
            assert code in (0, pa.UNIMPLEMENTED, 8), message
        reader.free(p)
    assert counts[pa.INVALID_ARGUMENT] > 100, counts  # the mutations reach the error paths
    assert counts["parsed"] > 10, counts              # ...and some still parse and run


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_fuzz_c_driver(folder, tmp_path, sanitize):
    driver = pa.build_c_program(pa.HERE / "prog_fuzz_main.c", tmp_path / "prog_fuzz",
                                sanitize=sanitize)
    artifacts = [str(folder / f"{c}.mlir") for c in pa.CORPUS_CASES]
    done = subprocess.run([str(driver), "4", "7", *artifacts], capture_output=True, text=True,
                          timeout=120, env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                                            "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert done.returncode == 0, done.stderr[-4000:]
    stats = dict(kv.split("=") for kv in done.stdout.split())
    assert int(stats["iterations"]) > 1000 and int(stats["parsed"]) > 10, stats
