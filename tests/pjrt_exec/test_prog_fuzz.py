"""Robustness of the program reader and interpreter: mutated and truncated artifacts from real
jax programs, and the regression corpus of every input a fuzzer found to break them.

Every input must give a program or an error with a known code and a message; programs that
parse are run on zero inputs, their buffers at every offset from malloc's alignment.  The
fuzzing is deterministic: a fixed number of mutants from fixed seeds, not a time budget, so
every machine tries the same inputs whatever its speed and a failure seen on one reproduces on
any other (`prog_fuzz COUNT SEED artifact...`, see prog_fuzz_main.c).  Coverage-guided fuzzing
is fuzz/run_libfuzzer.sh; what it finds joins corpus/, which runs here under ASan + UBSan."""
from __future__ import annotations

import random
import subprocess

import numpy as np
import pytest

import prog_artifacts as pa

#: (seed, mutants) per run of the C driver: about 1.5 s of the sanitized driver per 20,000 on
#: this kind of machine, a fraction of that plain
PLAIN_RUNS = [(1, 60000), (2, 60000), (3, 60000), (7, 60000)]
SANITIZED_RUNS = [(1, 20000), (2, 20000), (3, 20000), (7, 20000)]
DRIVER_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
              "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return pa.corpus(tmp_path_factory)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """The reader at -O2, as the plugin builds it (the cffi fuzz and the plain driver)."""
    return pa.build_prog_library(tmp_path_factory.mktemp("prog-lib"))


@pytest.fixture(scope="module")
def drivers(tmp_path_factory, library):
    """The C driver, plain (linked with `library`) and under ASan + UBSan."""
    out = tmp_path_factory.mktemp("prog-fuzz")
    main = pa.HERE / "prog_fuzz_main.c"
    return {False: pa.build_c_program(main, out / "prog_fuzz", library=library),
            True: pa.build_c_program(main, out / "prog_fuzz-asan", sanitize=True)}


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


def test_fuzz_through_cffi(folder, library):
    reader = pa.Reader(library)
    reader.lib.prog_set_loop_limit(1000)  # a mutated loop bound must not hang the fuzzer
    corpus = [(folder / f"{c}.mlir").read_bytes() for c in pa.CORPUS_CASES]
    counts = {"parsed": 0, pa.INVALID_ARGUMENT: 0, pa.UNIMPLEMENTED: 0}
    for data in mutants(1234, corpus, 20000):
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
    assert counts[pa.INVALID_ARGUMENT] > 5000, counts  # the mutations reach the error paths
    assert counts["parsed"] > 500, counts              # ...and some still parse and run


def _run(driver, *args, timeout=300):
    done = subprocess.run([str(driver), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=DRIVER_ENV)
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(kv.split("=") for kv in done.stdout.split())


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_fuzz_c_driver(folder, drivers, sanitize):
    artifacts = [folder / f"{c}.mlir" for c in pa.CORPUS_CASES]
    for seed, count in SANITIZED_RUNS if sanitize else PLAIN_RUNS:
        stats = _run(drivers[sanitize], count, seed, *artifacts)
        assert int(stats["iterations"]) == count, stats
        assert int(stats["parsed"]) > count // 50 and int(stats["ran"]) > count // 50, stats
        assert int(stats["invalid_argument"]) > count // 2, stats


def test_fuzz_c_driver_is_deterministic(folder, drivers):
    """The same seed tries the same inputs: two runs give the same counts, another seed not."""
    artifacts = [folder / f"{c}.mlir" for c in pa.CORPUS_CASES]
    first, again = (_run(drivers[False], 3000, 11, *artifacts) for _ in range(2))
    other = _run(drivers[False], 3000, 12, *artifacts)
    assert first == again
    assert other != first


def corpus_inputs():
    return sorted(p for p in pa.CORPUS_DIR.glob("*") if p.is_file() and p.suffix == ".bin")


def test_corpus_is_described():
    """Each regression input is listed in corpus/README.md with what it broke."""
    readme = (pa.CORPUS_DIR / "README.md").read_text()
    inputs = corpus_inputs()
    assert len(inputs) >= 7
    for p in inputs:
        assert f"`{p.name}`" in readme, p.name


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_regression_corpus(drivers, sanitize):
    """Every input a fuzzer ever found to crash, or to draw a sanitizer report, replayed (at
    malloc's alignment and 3 bytes off it), with the seed artifacts."""
    inputs = corpus_inputs() + sorted((pa.CORPUS_DIR / "seeds").glob("*.mlir"))
    stats = _run(drivers[sanitize], "--replay", *inputs)
    assert int(stats["iterations"]) == 2 * len(inputs), stats
    assert int(stats["ran"]) >= 2 * len(list((pa.CORPUS_DIR / "seeds").glob("*.mlir"))), stats
