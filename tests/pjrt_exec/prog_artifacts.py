"""Test helpers for the program reader (plugin_c/prog*.c) used WITHOUT PJRT: build it alone
into a small shared library, load it through cffi, and capture real artifacts from jax."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from pytest_dumpref.pjrt.build import find_compiler, header_dir, plugin_source_dir

HERE = Path(__file__).parent
#: float-cast-overflow: gcc's "undefined" leaves it out (clang's includes it), and a float
#: converted to an integer out of its range is exactly what a mutated program does
SANITIZE = ["-fsanitize=address,undefined,float-cast-overflow",
            "-fno-sanitize-recover=undefined,float-cast-overflow", "-fno-omit-frame-pointer",
            "-O1", "-g"]

CDEF = """
typedef struct { int code; char message[512]; } prog_status;
typedef struct { int dtype; int rank; int64_t dims[16]; } prog_shape;
typedef struct prog_program prog_program;
prog_program* prog_parse(const void* bytes, size_t size, prog_status* status);
void prog_free(prog_program* program);
int prog_num_inputs(const prog_program* program);
int prog_num_outputs(const prog_program* program);
const prog_shape* prog_input(const prog_program* program, int i);
const prog_shape* prog_output(const prog_program* program, int i);
const char* prog_name(const prog_program* program);
int prog_run(const prog_program* program, const void* const* inputs, void* const* outputs,
             prog_status* status);
void prog_set_loop_limit(int64_t limit);
"""
PROG_DTYPES = {1: "bool", 2: "int32", 3: "int64", 4: "float32", 5: "float64", 6: "bfloat16",
               7: "int8", 8: "uint8", 9: "uint32", 10: "uint64", 11: "float16", 12: "int16",
               13: "uint16", 14: "float8_e4m3fn", 15: "float8_e5m2", 16: "complex64",
               17: "complex128", 18: "int4", 19: "uint4"}
INVALID_ARGUMENT, UNIMPLEMENTED = 3, 12


def prog_sources():
    return sorted(str(p) for p in plugin_source_dir().glob("prog*.c"))


def build_prog_library(out_dir, *, sanitize=False) -> Path:
    out = Path(out_dir) / ("libprog-asan.so" if sanitize else "libprog.so")
    flags = SANITIZE if sanitize else ["-O2"]
    cmd = [find_compiler(), "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", *flags,
           "-o", str(out), *prog_sources(), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def build_c_program(source: Path, out: Path, *, sanitize=False, library: Path | None = None) -> Path:
    """A standalone C program linked with the reader (the fuzz driver): compiled with it, or
    linked against `library` (a build_prog_library output), which saves compiling it again."""
    flags = SANITIZE if sanitize else ["-O2"]
    reader = ([str(library), f"-Wl,-rpath,{Path(library).parent}"] if library is not None
              else prog_sources())
    cmd = [find_compiler(), "-std=c11", "-Wall", "-Wextra", *flags, f"-I{plugin_source_dir()}",
           f"-I{HERE}", "-o", str(out), str(source), *reader, "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def build_capture_shim(out_dir) -> Path:
    out = Path(out_dir) / "libprog_capture.so"
    cmd = [find_compiler(), "-std=c11", "-fPIC", "-shared", "-O1", f"-I{header_dir()}",
           f"-I{plugin_source_dir()}", "-o", str(out), str(HERE / "prog_capture_shim.c"), "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def real_cpu_plugin() -> Path:
    return Path(header_dir()).parent / "xla_cpu_pjrt.so"


def capture(out_dir, names, shim: Path) -> Path:
    """Artifacts (and inputs/outputs) of prog_cases `names`, as jax sends them to a plugin."""
    out_dir = Path(out_dir)
    env = dict(os.environ, PROG_CAPTURE_REAL_PLUGIN=str(real_cpu_plugin()), DUMPREF_PJRT="0",
               JAX_PLATFORMS="")
    done = subprocess.run([sys.executable, str(HERE / "prog_capture_runner.py"), str(shim),
                           str(out_dir), *names], env=env, capture_output=True, text=True,
                          timeout=600, cwd=HERE.parents[1])
    if done.returncode != 0:
        raise RuntimeError(f"capturing artifacts failed:\n{done.stderr[-3000:]}")
    return out_dir


def load_case(folder, name):
    """(artifact bytes, inputs, XLA's outputs) of a captured case."""
    import ast
    import ml_dtypes
    folder = Path(folder)
    z = np.load(folder / f"{name}.npz", allow_pickle=False)
    dtypes = ast.literal_eval(str(z["dtypes"]))

    def array(key):
        a = z[key]
        return a.view(ml_dtypes.bfloat16) if dtypes[key] == "bfloat16" else a

    ins = [array(f"in{k}") for k in range(sum(k.startswith("in") for k in dtypes))]
    outs = [array(f"out{k}") for k in range(sum(k.startswith("out") for k in dtypes))]
    return (folder / f"{name}.mlir").read_bytes(), ins, outs


class Reader:
    """The reader through cffi: parse bytes, inspect the signature, run on numpy arrays."""

    def __init__(self, library: Path):
        import cffi
        self.ffi = cffi.FFI()
        self.ffi.cdef(CDEF)
        self.lib = self.ffi.dlopen(str(library))

    def parse(self, data: bytes):
        """(program or None, status code, message)."""
        status = self.ffi.new("prog_status*")
        p = self.lib.prog_parse(data, len(data), status)
        return (p if p != self.ffi.NULL else None), status.code, self.ffi.string(status.message).decode("utf-8", "replace")

    def signature(self, p):
        def shapes(n, get):
            out = []
            for i in range(n):
                s = get(p, i)
                out.append((PROG_DTYPES[s.dtype], tuple(s.dims[0:s.rank])))
            return out
        return (shapes(self.lib.prog_num_inputs(p), self.lib.prog_input),
                shapes(self.lib.prog_num_outputs(p), self.lib.prog_output))

    def run(self, p, inputs):
        import ml_dtypes  # noqa: F401  (bfloat16 arrays)
        ins = [np.ascontiguousarray(x) for x in inputs]
        outs = [np.zeros(shape, np.dtype(dt)) for dt, shape in self.signature(p)[1]]
        keep = ins + outs
        inp = self.ffi.new("void*[]", [self.ffi.cast("void*", x.ctypes.data) for x in ins] or 1)
        outp = self.ffi.new("void*[]", [self.ffi.cast("void*", o.ctypes.data) for o in outs] or 1)
        status = self.ffi.new("prog_status*")
        code = self.lib.prog_run(p, inp, outp, status)
        del keep
        return code, self.ffi.string(status.message).decode("utf-8", "replace"), outs

    def free(self, p):
        self.lib.prog_free(p)


#: The regression corpus: every input a fuzzer found to crash the reader or the interpreter (or
#: to draw a sanitizer report), with the seed artifacts libFuzzer starts from (corpus/seeds).
CORPUS_DIR = HERE / "corpus"

#: The cases whose artifacts the reader tests and the fuzzer use (captured once per session).
CORPUS_CASES = ["add_one", "mlp", "sgd_step", "softmax", "layernorm", "causal_attention",
                "transformer_block", "bf16", "pred_logic", "scalar", "empty", "s64_arith",
                "dot_general", "private_calls", "shape_ops", "reductions", "convert",
                "compare_select", "math_ops", "while_loop", "cond_switch", "scan", "sort",
                "top_k_argmax", "windows", "dynamic_slices", "pad", "gather_scatter", "conv",
                "bits", "int_widths", "complex", "mixed_dot", "fft"]
_corpus = {}


def corpus(tmp_path_factory) -> Path:
    """A folder of captured artifacts (+ the reader library), made once per test session."""
    if "dir" not in _corpus:
        folder = tmp_path_factory.mktemp("prog-corpus")
        capture(folder, CORPUS_CASES, build_capture_shim(folder))
        _corpus["dir"] = folder
    return _corpus["dir"]
