"""Study 3: the PJRT device, built from nothing and measured, not asserted.

Every table here comes from the measured map (pytest_dumpref/pjrt/pjrt_map.py): jax runs in a
subprocess against the plugin built in this session, with the plugin's call trace on (a record
per call: the args struct as jax filled it and as the device left it, decoded with the real
pjrt_c_api.h); then each implemented entry point that jax called is knocked out in turn
(DUMPREF_PJRT_DISABLE), and the failure it caused is kept as the reason the device needs it.
The minimal plugin of the appendix (plugin_c/minimal/minimal.c) is built and run the same way,
and one-line edits of it measure the rules the map states (pytest_dumpref/pjrt/minimal.py).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from pytest_dumpref.pjrt import minimal
from pytest_dumpref.pjrt.build import LIBRARY_NAME, build_plugin
from pytest_dumpref.pjrt.jax_plugin import DEFAULT_PRIORITY
from pytest_dumpref.pjrt.pjrt_map import (ERROR_CHANNEL, JAX_VIEW_CODE, LEVELS, OK_MARK,
                                          jax_view_table, level_passed, sent_facts)
from pytest_dumpref.pjrt.trace import PRELUDE, run_jax

pytestmark = pytest.mark.pjrt

METHOD = "call trace + knock-out of each entry point, jax in a subprocess"
LEVEL2_ARRAYS = "f32[4,3] (transposed view), s8[] (0-d), pred[0,3] (empty), bf16[6]"

# How every snippet of this study runs, for a reader who wants to run one: the runner
# (pytest_dumpref/pjrt/trace.py) puts PRELUDE before the snippet and registers the plugin
# through jax's plugin discovery, before the snippet's first line.
HOW_SNIPPETS_RUN = (
    f"Every snippet in this study is run as shown, in a fresh Python: its first line "
    f"({PRELUDE.strip()}) is the prelude that pytest_dumpref/pjrt/trace.py (PRELUDE) puts before "
    f"each one. The plugin is registered by jax itself at start-up, before that line, in one of "
    f"two ways. (1) With this package installed (pip install -e .), jax imports the jax_plugins "
    f"entry point dumpref = pytest_dumpref.pjrt.jax_plugin in every process, and it does nothing "
    f"unless the process asks for the device: DUMPREF_PJRT=1, or DUMPREF_PJRT_LIBRARY=PATH "
    f"(the claims name the library built in this run). Asked, it registers that library, or "
    f"builds {LIBRARY_NAME} into ~/.cache/pytest-dumpref/pjrt/<digest>/ on first use (a C "
    f"compiler is needed), at backend priority {DEFAULT_PRIORITY} (DUMPREF_PJRT_PRIORITY), below "
    f"the CPU's 0, so jax's default device stays the CPU. (2) Without this package, jax's own "
    f"variable PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:/path/to/lib.so registers any library, at "
    f"jax's plugin priority 400: above the CPU, so the device becomes jax's default (measured "
    f"below). The snippets name the device, so they pass either way; this claim runs level 1's "
    f"snippet the second way too, with the command below.")
PLAIN_REGISTRATION = ("PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:/path/to/" + LIBRARY_NAME
                      + " python level1.py   # level1.py: the level 1 snippet, as shown below")
DEFAULT_BACKEND = "import json\nprint(json.dumps([jax.default_backend(), [d.platform for d in jax.devices()]]))\n"


def _as_run(code: str) -> str:
    """A snippet as the runner executes it: the prelude, then the snippet."""
    return PRELUDE + code.strip() + "\n"


def _compress(calls):
    """Consecutive repeats folded: the call order stays readable."""
    rows = []
    for name in calls:
        if rows and rows[-1][0] == name:
            rows[-1][1] += 1
        else:
            rows.append([name, 1])
    return [{"#": i + 1, "entry point": n, "times in a row": k} for i, (n, k) in enumerate(rows)]


@pytest.mark.claim("jax.devices() on this machine lists the dumpref device, loaded from the "
                   "library built in this run.", title="jax lists the device built in this run",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_jax_lists_the_device_built_in_this_run(pjrt_plugin, evidence):
    run = pjrt_plugin.run_jax(
        "import hashlib, json\n"
        "devs = repr(jax.devices())\n"
        "libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'dumpref_pjrt' in l})\n"
        "print(json.dumps({'devices': devs, 'platform': jax.devices()[0].platform,"
        " 'libs': [[p, hashlib.sha256(open(p, 'rb').read()).hexdigest()] for p in libs]}))\n",
        env={"DUMPREF_PJRT_PRIORITY": "500"}, trace=False)
    assert run.ok, run.why
    got = json.loads(run.stdout.strip().splitlines()[-1])
    evidence.excerpt("print(jax.devices()) with the plugin registered above the CPU backend "
                     "(DUMPREF_PJRT_PRIORITY=500)", got["devices"])
    # Which backend is jax's default, measured for each way of registering (and for none).
    plain_env = minimal.plain_registration(pjrt_plugin.path)
    ways = {"entry point, DUMPREF_PJRT=1 (priority -100)": {},
            "PJRT_NAMES_AND_LIBRARY_PATHS (jax's priority 400)": plain_env,
            "neither (this package installed, the device not asked for)": {"DUMPREF_PJRT": "",
                                                                           "DUMPREF_PJRT_LIBRARY": ""}}
    rows = []
    for way, env in ways.items():
        r = pjrt_plugin.run_jax(DEFAULT_BACKEND, trace=False, env=env)
        assert r.ok, (way, r.why)
        default, platforms = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append({"registered by": way, "jax.default_backend()": default,
                     "platforms of jax.devices()": ", ".join(platforms),
                     "stderr mentions dumpref": "yes" if "dumpref" in r.stderr else "no"})
    evidence.table("jax's default backend, by how the plugin was registered", rows)
    assert [r["jax.default_backend()"] for r in rows] == ["cpu", "dumpref", "cpu"], rows
    assert rows[2]["platforms of jax.devices()"] == "cpu" and rows[2]["stderr mentions dumpref"] == "no"
    # The registration a reader can use without this package's entry point, checked here.
    plain = pjrt_plugin.run_jax(LEVELS[0].code, trace=False, env=plain_env)
    assert plain.ok and OK_MARK in plain.stdout, plain.why
    evidence.note(HOW_SNIPPETS_RUN)
    evidence.excerpt("a snippet run with the plugin registered by jax's own variable, not the entry "
                     f"point (prints {OK_MARK} here)", PLAIN_REGISTRATION, lang="bash")
    assert got["platform"] == "dumpref"
    assert [sha for _, sha in got["libs"]] == [pjrt_plugin.sha256]
    assert got["libs"][0][0] == str(pjrt_plugin.path)


def _claim_level(pjrt_map, evidence, number):
    m = pjrt_map.level(number)
    rows = [r for r in pjrt_map.first_need_table() if r["level"] == number]
    earlier = {n for lm in pjrt_map.levels if lm.level.number < number for n in lm.called}
    evidence.note("Two tiers. Every entry point jax calls must be a real function: jaxlib calls "
                  "the slot without checking it for NULL (the one-line edits below measure what a "
                  "NULL slot does). Of those, the needed ones must also succeed; the others may answer "
                  "UNIMPLEMENTED. Needed is measured by knocking each one out: "
                  "DUMPREF_PJRT_DISABLE=PJRT_Name (read by plugin_c/hooks.c) makes that entry point "
                  "answer UNIMPLEMENTED at once, without rebuilding, and the level is run again; "
                  "the error channel (PJRT_Error_*) cannot be knocked out, since it is how jax reads "
                  "every failure.")
    evidence.table(f"Level {number}: every entry point jax called (in the PJRT_Api table's "
                   "order) and its tier", m.tier_table(earlier))
    evidence.number(f"entry points jax calls at level {number} (must be functions)", len(m.called))
    evidence.table(f"Level {number} ({m.level.goal}): entry points in the order they had to be "
                   "filled, and what broke without each", rows)
    evidence.table(f"Level {number}, what each entry point new at this level was sent and filled "
                   "in the run (every distinct value; a pointer shows NULL, the earlier output it "
                   "came from, or set; * marks what the device noted about memory behind a "
                   "pointer; in the table's order)", m.fill_table(only=set(m.called) - earlier))
    evidence.number(f"entry points level {number} needs", len(m.needed))
    evidence.number(f"of them new at level {number}", len(rows))
    evidence.number(f"distinct entry points jax calls at level {number}",
                    len(set(m.calls)))
    evidence.table(f"Called at level {number}, implemented, but not needed (knocked out, the "
                   "level still passed)", [{"entry point": k, "result": v}
                                           for k, v in m.not_needed.items()] or
                   [{"entry point": "(none)", "result": ""}])
    if m.unimplemented_called:
        evidence.note(f"jax also called {', '.join(m.unimplemented_called)}, which answers "
                      "UNIMPLEMENTED, and carried on; it read that answer through "
                      + "; ".join(f"{k} ({v})" for k, v in m.error_reads.items()) + ".")
    evidence.excerpt(f"Level {number} snippet, as run in a fresh Python with the plugin registered "
                     "(first line: the prelude every snippet gets; see the first claim of this study)",
                     _as_run(m.level.code), lang="python")
    return m, rows


@pytest.mark.claim("Listing the device (level 1) calls the entry points listed and needs exactly "
                   "the ones in the second table, filled in the order shown with the values shown; "
                   "without any one of them jax fails or aborts, for the reason shown (one only "
                   "at exit, after the level passed).", title="Level 1: listing the device",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_level1_entry_points_in_order_of_need(pjrt_plugin, pjrt_map, evidence):
    m, rows = _claim_level(pjrt_map, evidence, 1)
    assert m.needed and all(n.why for n in m.needed)
    assert m.needed_names[:2] == ["PJRT_Plugin_Initialize", "PJRT_Client_Create"]
    at_exit = [n for n in m.needed if n.at_exit]
    evidence.table("Level 1: knocked out, every check of the level passed, and the process then "
                   "died at exit", [{"entry point": n.entry_point, "how the process ended": n.why}
                                    for n in at_exit])
    evidence.number("level 1 entry points whose knock-out fails only at exit", len(at_exit))
    assert [n.entry_point for n in at_exit] == ["PJRT_Client_Destroy"], at_exit


@pytest.mark.claim("Holding arrays (level 2: device_put, np.asarray, delete) calls the entry "
                   "points listed and needs the level-1 ones plus those in the second table, in "
                   "the order shown, each with what broke without it and the values it was sent "
                   "and filled.", title="Level 2: holding arrays",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_level2_entry_points_in_order_of_need(pjrt_plugin, pjrt_map, evidence):
    evidence.note(f"Level-2 arrays: {LEVEL2_ARRAYS}.")
    m, rows = _claim_level(pjrt_map, evidence, 2)
    assert rows and all(r["why (what broke without it)"] for r in rows)
    assert set(pjrt_map.level(1).needed_names) <= set(m.needed_names) | set(ERROR_CHANNEL)


@pytest.mark.claim("Running jitted programs (level 3: jax.jit compiles StableHLO bytecode that the "
                   "device reads and interprets in C) needs the level-1 and level-2 entry points "
                   "its snippet calls plus the ones in the table, in the order shown, each with what broke without it.",
                   title="Level 3: running jitted programs",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (2, 3)}, method=METHOD)
def test_level3_entry_points_in_order_of_need(pjrt_plugin, pjrt_map, evidence):
    m, rows = _claim_level(pjrt_map, evidence, 3)
    earlier = set(pjrt_map.level(1).needed_names) | set(pjrt_map.level(2).needed_names)
    not_needed = sorted(earlier - set(m.needed_names))
    uncalled = [n for n in not_needed if n not in m.called]
    evidence.note(f"Of the {len(earlier)} entry points levels 1 and 2 need, level 3's snippet needs "
                  f"{len(earlier) - len(not_needed)}"
                  + (f"; it never calls {', '.join(uncalled)}" if uncalled else "")
                  + (f"; it calls but does not need {', '.join(n for n in not_needed if n not in uncalled)}"
                     if len(uncalled) < len(not_needed) else "") + ".")
    names = [r["entry point"] for r in rows]
    assert "PJRT_Client_Compile" in names and "PJRT_LoadedExecutable_Execute" in names
    assert names.index("PJRT_Client_Compile") < names.index("PJRT_LoadedExecutable_Execute")
    assert all(r["why (what broke without it)"] for r in rows)


# The block of Study 1, at its shapes: the program the pass study compiles is the one the
# device runs.  The reference is XLA's own CPU backend, in the same subprocess.
BLOCK_SHAPES = {"x": (4, 128, 256)}
BLOCK_RUN = """
from pytest_dumpref.examples import transformer_block, transformer_params
import functools, json
x = np.random.default_rng(1).standard_normal((4, 128, 256)).astype(np.float32)
params = transformer_params(256, 1024)
f = jax.jit(functools.partial(transformer_block, n_heads=4))
dev, cpu = jax.devices('dumpref')[0], jax.devices('cpu')[0]
got = f(jax.device_put(x, dev), jax.device_put(params, dev))
want = np.asarray(f(jax.device_put(x, cpu), jax.device_put(params, cpu)))
got_host = np.asarray(got)
err = float(np.max(np.abs(got_host - want)) / np.max(np.abs(want)))
print(json.dumps({"x": [str(x.dtype), list(x.shape)],
                  "device": str(list(got.devices())[0]), "shape": list(got_host.shape),
                  "dtype": str(got_host.dtype), "max_rel_err": err}))
"""


@pytest.mark.claim("The transformer block of Study 1, jitted, runs on the dumpref device and "
                   "matches XLA's CPU backend to a relative error below 1e-5.", title="Study 1's transformer block on the device",
                   finding="relative error {max relative error, dumpref vs CPU} against the CPU backend",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes=BLOCK_SHAPES,
                        method="jax.jit on jax.devices('dumpref')[0] vs jax.devices('cpu')[0], one subprocess; "
                               "error = max |dumpref - cpu| / max |cpu|")
def test_transformer_block_runs_on_the_device(pjrt_plugin, evidence):
    run = pjrt_plugin.run_jax(BLOCK_RUN, trace=True, timeout=300)
    assert run.ok, run.why
    got = json.loads(run.stdout.strip().splitlines()[-1])
    # what the subprocess actually fed the program, checked by the core against the provenance
    evidence.observe(params={"x": (got["x"][0], tuple(got["x"][1]))})
    evidence.excerpt("what ran, in a fresh Python with the plugin registered (first line: the "
                     "prelude every snippet gets; see the first claim of this study)", _as_run(BLOCK_RUN),
                     lang="python")
    # The error is a few float32 roundings whose size depends on summation order: the check
    # holds it to the claim's bound, not to the last run's value.
    assert got["max_rel_err"] < 1e-5
    evidence.number("max relative error, dumpref vs CPU", got["max_rel_err"], bound=("<", 1e-5))
    evidence.number("PJRT_LoadedExecutable_Execute calls", run.trace.count("PJRT_LoadedExecutable_Execute"))
    assert got["device"].startswith("dumpref") and got["shape"] == [4, 128, 256] and got["dtype"] == "float32"
    assert got["max_rel_err"] < 1e-5


# A whole model trains on the device: pytest_dumpref/examples.py's GPT-2 style step (vocab 64,
# 16 positions, d_model 32, 2 layers, batch 2), two Adam steps from the same start on the
# device and on XLA's CPU backend, in one subprocess.
GPT2_SHAPES = {"tokens": (2, 17), "wte": (64, 32), "wpe": (17, 32), "blocks.w1": (2, 32, 64)}
GPT2_RUN = """
from pytest_dumpref import examples as ex
import json
params, state, tokens = ex.gpt2_step_inputs()
step = jax.jit(ex.gpt2_train_step)
dev, cpu = jax.devices('dumpref')[0], jax.devices('cpu')[0]
got = step(*jax.device_put((params, state, tokens), dev))
want = step(*jax.device_put((params, state, tokens), cpu))
got2 = step(got[0], got[1], jax.device_put(tokens, dev))
want2 = step(want[0], want[1], jax.device_put(tokens, cpu))
err = ex.max_errors((want, want2), (got, got2))
leaves = jax.tree_util.tree_leaves((got, got2))
print(json.dumps({"params": {k: [str(a.dtype), list(a.shape)] for k, a in
                             [("tokens", tokens), ("wte", params["wte"]), ("wpe", params["wpe"]),
                              ("blocks.w1", params["blocks"]["w1"])]},
                  "platforms": sorted({d.platform for l in leaves for d in l.devices()}),
                  "outputs": len(leaves), "loss": [float(want[2]), float(got[2]), float(want2[2]), float(got2[2])],
                  **err}))
"""


@pytest.mark.claim("A GPT-2 style training step (token and position embeddings by gather, two causal "
                   "attention layers under lax.scan, cross-entropy, its gradient with the scatter-add "
                   "into the embeddings, an Adam update), jitted on the dumpref device, matches XLA's "
                   "CPU backend to f32 rounding: over two steps, every parameter and optimizer moment "
                   "within a relative error of 1e-4.", title="A model's training step on the device",
                   finding="two Adam steps, relative error {max relative error, dumpref vs CPU} against the CPU backend",
                   section="pjrt")
@pytest.mark.provenance(dtype=("f32", "s32"), shapes=GPT2_SHAPES,
                        method="jax.jit(examples.gpt2_train_step) on jax.devices('dumpref')[0] vs "
                               "jax.devices('cpu')[0], one subprocess, two steps; relative error = "
                               "max over output arrays of max |dumpref - cpu| / max |cpu|")
def test_gpt2_training_step_runs_on_the_device(pjrt_plugin, evidence):
    run = pjrt_plugin.run_jax(GPT2_RUN, trace=False, timeout=300)
    assert run.ok, run.why
    got = json.loads(run.stdout.strip().splitlines()[-1])
    evidence.observe(params={k: (d, tuple(s)) for k, (d, s) in got["params"].items()})
    evidence.excerpt("what ran, in a fresh Python with the plugin registered", _as_run(GPT2_RUN),
                     lang="python")
    # rounding differences whose size depends on summation order: held to the claim's bound
    assert got["max_rel"] < 1e-4
    evidence.number("max absolute error, dumpref vs CPU", got["max_abs"], tolerance=1.0)
    evidence.number("max relative error, dumpref vs CPU", got["max_rel"], bound=("<", 1e-4))
    evidence.number("loss before the first step (CPU)", got["loss"][0], tolerance=1e-5)
    evidence.number("loss before the second step (CPU)", got["loss"][2], tolerance=1e-5)
    evidence.number("output arrays compared", got["outputs"])
    assert got["platforms"] == ["dumpref"]
    assert got["max_rel"] < 1e-4
    assert abs(got["loss"][0] - got["loss"][1]) < 1e-5 and abs(got["loss"][2] - got["loss"][3]) < 1e-5
    assert got["loss"][2] < got["loss"][0]



@pytest.mark.claim("Object by object, listing the device (level 1) needs the plugin, client, "
                   "device, device description and memory; holding arrays (level 2) first needs "
                   "buffers and events; running programs (level 3) first needs executables, "
                   "loaded and plain.", title="The structs, object by object",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_structs_filled_level_by_level(pjrt_plugin, pjrt_map, evidence):
    seen, rows = {}, []
    for r in pjrt_map.first_need_table():
        key = r["struct"]
        if key not in seen:
            seen[key] = len(rows)
            rows.append({"first level": r["level"], "struct": f"PJRT_{key}",
                         "first needed entry point": r["entry point"], "entry points needed": 0})
        rows[seen[key]]["entry points needed"] += 1
    evidence.table("Structs (PJRT objects) in the order the device had to fill them", rows)
    evidence.number("structs filled", len(rows))
    first_level = {r["struct"]: r["first level"] for r in rows}
    assert first_level == {
        "PJRT_Plugin": 1, "PJRT_Client": 1, "PJRT_Device": 1, "PJRT_DeviceDescription": 1,
        "PJRT_Memory": 1, "PJRT_Buffer": 2, "PJRT_Event": 2,
        "PJRT_LoadedExecutable": 3, "PJRT_Executable": 3}, first_level


@pytest.mark.claim("jax calls the entry points in the order listed (the full call trace of "
                   "level 2, repeats folded).", title="The call order of level 2",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_call_order_jax_uses(pjrt_plugin, pjrt_map, evidence):
    calls = pjrt_map.level(2).calls
    evidence.table("Level 2 call trace, in call order", _compress(calls))
    evidence.number("calls in the level-2 trace", len(calls))
    assert calls[:2] == ["PJRT_Plugin_Initialize", "PJRT_Client_Create"]
    assert calls.index("PJRT_Client_BufferFromHostBuffer") < calls.index("PJRT_Buffer_ToHostBuffer")


@pytest.mark.claim("The needed entry points alone suffice: with every other implemented entry "
                   "point knocked out at once, both levels still pass.", title="The needed entry points suffice",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_needed_set_suffices(pjrt_plugin, pjrt_map, evidence):
    evidence.number("entry points in the PJRT_Api table", len(pjrt_plugin.api.slot_names))
    evidence.number("entry points the device implements", len(pjrt_map.implemented))
    for lm in pjrt_map.levels:
        evidence.number(f"needed by level {lm.level.number}", len(lm.needed))
    evidence.number("knock-out runs", pjrt_map.runs)
    assert all(lm.sufficient for lm in pjrt_map.levels), [lm.sufficiency_why for lm in pjrt_map.levels]


# numpy's strides of level 2's first array (the transposed f32 view), computed here
TRANSPOSED = np.arange(12, dtype=np.float32).reshape(3, 4).T


@pytest.mark.claim("What jax sends and what it makes of what the device fills, read off the traces "
                   "of the three levels: every struct_size is the header's, PJRT_Client_LookupDevice "
                   "is asked for the id PJRT_DeviceDescription_Id returned, a transposed array "
                   "arrives as numpy's byte strides, PJRT_Buffer_ToHostBuffer always gets a dense "
                   "row-major host_layout, device_layout is NULL, and no event is ever awaited "
                   "(jax registers callbacks or asks); each value the device filled for its device and memory is what jax "
                   "shows.", title="What jax sends, and what it shows of what the device fills",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method=METHOD)
def test_what_jax_sends_and_shows(pjrt_plugin, pjrt_map, evidence):
    facts = sent_facts(pjrt_map, list(TRANSPOSED.strides))
    evidence.table("What jax sent, in every call of levels 1-3", facts)
    view = jax_view_table(pjrt_map.jax_view, pjrt_map.jax_view_calls)
    evidence.table("Each value the device filled, and where jax shows it", view)
    evidence.excerpt("how jax's side was read (a snippet, run with the plugin registered)",
                     _as_run(JAX_VIEW_CODE), lang="python")
    assert [f["what jax does"] for f in facts if f["holds"] != "yes"] == []
    assert [v["entry point"] for v in view if v["relation"] == "differs"] == []


@pytest.mark.claim("One-line edits of the minimal plugin measure the rules the map states: a NULL "
                   "slot that jax calls kills the host process with SIGSEGV, a NULL slot it never "
                   "calls is harmless, PJRT_Buffer_ToHostBuffer must hand back an event while "
                   "PJRT_Client_BufferFromHostBuffer may hand back none, the table's API version "
                   "must be jax's major and not older than its minimum minor, while the table's "
                   "struct_size goes unchecked, the memory kind may be any string, and an "
                   "UNIMPLEMENTED answer is not always survivable: when a memory's to_string "
                   "fails, jaxlib aborts the host process with SIGABRT.",
                   title="The rules, measured by one-line edits",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method="one-line edit of plugin_c/minimal/minimal.c, "
                        "built and run on a level snippet in a subprocess, registered by PJRT_NAMES_AND_LIBRARY_PATHS")
def test_rules_measured_by_one_line_edits(pjrt_plugin, evidence, tmp_path):
    results = {e.name: minimal.run_edit(e, tmp_path / f"edit{i}") for i, e in enumerate(minimal.EDITS)}
    evidence.table("Each edit, the level run on the edited plugin, and how the run ended", [
        {"edit": r.edit.name, "rule tested": r.edit.rule, "line of minimal.c": r.edit.find.strip(),
         "edited to": r.edit.replace.strip(), "level": r.edit.level,
         "level passed": "yes" if r.passed else "no", "how the run ended": r.why}
        for r in results.values()])
    null_called = results["NULL slot jax calls"]
    evidence.number("return code of the level's python with a NULL slot jax calls (minus the signal "
                    "that killed it, as Python's subprocess reports it; a shell shows 128 + signal)",
                    null_called.returncode)
    assert null_called.returncode == -11 and not null_called.checks_passed  # SIGSEGV
    assert results["NULL slot jax never calls"].passed
    assert not results["ToHostBuffer without its event"].passed
    assert results["BufferFromHostBuffer without its event"].passed
    assert results["memory kind 'any name at all'"].passed
    assert "older than the minimum supported version" in results["API version 0.0"].why
    assert "major version" in results["API major version 1"].why
    assert not results["API version 0.0"].passed and not results["API major version 1"].passed
    assert results["table struct_size 0"].passed
    aborted = results["Memory_ToString answering UNIMPLEMENTED"]
    assert aborted.returncode == -6 and not aborted.checks_passed, (aborted.returncode, aborted.why)  # SIGABRT


@pytest.mark.claim("Appendix: the minimal plugin below, one C file that fills only the entry points "
                   "the map found needed and answers UNIMPLEMENTED in every other slot, builds "
                   "against the real pjrt_c_api.h with the command shown and passes level 1 and "
                   "level 2 when registered with jax's own PJRT_NAMES_AND_LIBRARY_PATHS; its size "
                   "against the full plugin is in the numbers.", title="Appendix: the minimal plugin, to build without this repository",
                   finding="{lines of minimal.c} lines of C fill {slots it fills (SLOT entries of its table)} slots and run levels 1 and 2",
                   section="pjrt")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4, 3)}, method="the reader's recipe run as written in a fresh "
                        "folder; level snippets in subprocesses; sizes counted from the source and the built table")
def test_minimal_plugin_appendix(pjrt_plugin, pjrt_map, evidence, tmp_path):
    built = build_plugin(tmp_path / "lib", minimal=True)
    size = minimal.size(built.path, len(pjrt_map.implemented))
    evidence.number("lines of minimal.c", size.lines)
    evidence.number("slots it fills (SLOT entries of its table)", len(size.filled_in_source))
    evidence.number("slots filled in the built table (not the shared UNIMPLEMENTED)", size.filled_in_library)
    evidence.number("slots of the PJRT_Api table", size.slots)
    evidence.number("lines of the full plugin (plugin_c/*.c, *.h)", size.full_lines)
    evidence.number("... of them outside the program reader and executables (levels 1-2)",
                    size.full_lines_levels_1_2)
    evidence.number("entry points the full plugin implements", size.full_implemented)
    needed = set(pjrt_map.level(1).needed_names) | set(pjrt_map.level(2).needed_names) | set(ERROR_CHANNEL)
    assert set(size.filled_in_source) == needed, set(size.filled_in_source) ^ needed
    assert size.filled_in_library == len(size.filled_in_source)
    evidence.note(f"The {len(size.filled_in_source)} slots it fills are the {len(needed - set(ERROR_CHANNEL))} "
                  f"entry points levels 1 and 2 need and the {len(ERROR_CHANNEL)} of the error channel ("
                  + ", ".join(sorted(ERROR_CHANNEL)) + "). To check a copy of minimal.c below: sha256 "
                  + hashlib.sha256(minimal.source_path().read_bytes()).hexdigest() + " (the file as "
                  "shown, ending in one newline).")
    # The table's own fields, as the built library reports them, against the header's.
    api = built.api
    evidence.note(f"The PJRT_Api table itself: struct_size = {api.struct_size} (the header's "
                  f"PJRT_Api_STRUCT_SIZE: {api.header_struct_size('PJRT_Api')}), pjrt_api_version "
                  f"{api.version[0]}.{api.version[1]} (the header's PJRT_API_MAJOR.PJRT_API_MINOR), "
                  "extension_start NULL. The error struct is the plugin's own: jax only holds the "
                  "pointer and reads it back through PJRT_Error_GetCode and PJRT_Error_Message, "
                  "then frees it with PJRT_Error_Destroy.")
    assert api.struct_size == api.header_struct_size("PJRT_Api")
    attributes = minimal.attribute_counts(api)
    # The reader's recipe, run as written in a folder of its own.
    done = minimal.run_reader_recipe(tmp_path / "reader", {
        f"level{lv.number}.py": _as_run(lv.code) for lv in LEVELS[:2]})
    marks = done.stdout.count(OK_MARK)
    evidence.number("level snippets that printed their mark in the reader's run", marks)
    assert done.returncode == 0 and marks == 2, done.stdout[-2000:] + done.stderr[-2000:]
    evidence.excerpt("Build and run it: the reader's recipe, run as written here (minimal.c, "
                     "level1.py and level2.py in one folder)", minimal.READER_RECIPE, lang="bash")
    # Level 3 is beyond it: jit needs PJRT_Client_Compile, which it answers UNIMPLEMENTED.
    runs = minimal.run_levels(built.path)
    evidence.table("The minimal plugin at each level (registered by PJRT_NAMES_AND_LIBRARY_PATHS)",
                   [{"level": n, "goal": LEVELS[n - 1].goal, "passed": "yes" if level_passed(r) else "no",
                     "how it ended": r.why} for n, r in runs.items()])
    assert level_passed(runs[1]) and level_passed(runs[2]) and not level_passed(runs[3])
    view = run_jax(built.path, JAX_VIEW_CODE, trace=False, env=minimal.plain_registration(built.path))
    assert view.ok, view.why
    shown = json.loads(view.stdout.strip().splitlines()[-1])
    evidence.note(f"jax's view of it: platform {shown['d.platform']!r}, memory kind "
                  f"{shown['d.default_memory().kind']!r} (the file's \"hbm\": the kind is a free "
                  f"string), repr {shown['repr(d)']!r}; it reports {attributes['plugin']} plugin "
                  f"and {attributes['device']} device attributes (asked through cffi), and jax "
                  "accepts both.")
    assert shown["d.default_memory().kind"] == "hbm"
    assert attributes == {"plugin": 0, "device": 0}
    evidence.note("How to read it: every entry point takes one args struct; jax fills the inputs "
                  "and struct_size, the plugin fills the fields marked // out in pjrt_c_api.h and "
                  "returns NULL for success or a PJRT_Error* it allocated. The objects behind the "
                  "handles are the plugin's own structs. To see what each entry point is for, "
                  "remove its SLOT(name) entry from the table (a line of the table may hold "
                  "several; the compiler then warns that the function is unused): that is the "
                  "knock-out the level tables above were measured with, and the level then fails "
                  "as their 'why' column says.")
    evidence.excerpt("plugin_c/minimal/minimal.c, the whole file", minimal.source_path().read_text(),
                     lang="c")
    for lv in LEVELS[:2]:
        evidence.excerpt(f"level{lv.number}.py (level {lv.number}: {lv.goal})", _as_run(lv.code),
                         lang="python")
