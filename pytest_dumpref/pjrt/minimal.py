"""The minimal plugin (``plugin_c/minimal/minimal.c``): its size, its levels, and one-line edits.

Study 3's appendix prints the file whole.  Here it is measured, not described:

- :func:`size` counts its lines and the slots it fills, from the source (the ``SLOT(...)`` rows
  of its table) and from the built library (slots whose function is not the one shared
  ``unimplemented``), against the full plugin;
- :func:`run_levels` runs level snippets against it, registered the way a reader without this
  package would: ``PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:LIB``;
- :data:`EDITS` are the experiments the map's rules rest on, each a one-line change of the file
  (a NULL slot jax calls, a NULL slot it never calls, a host transfer without its event, the
  table's version and size, the memory kind): the edited copy is built and the level run, so
  each rule is a measurement;
- the rows and notes Study 3 records of those runs (the contract in words, the appendix's
  table and jax's view of it) are made here, beside the runs, so its claims hold only their
  sentences and assertions.  x + 1 on this plugin (level 3 from the page) is :mod:`.add_one`.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .build import MINIMAL_SOURCE, build_plugin, plugin_source_dir
from .pjrt_map import LEVELS, level_checks_passed, level_passed


def source_path() -> Path:
    return plugin_source_dir() / MINIMAL_SOURCE


def plain_registration(library: Path) -> dict:
    """The environment of a reader's run: jax's own variable, this package's entry point off."""
    return {"DUMPREF_PJRT": "0", "PJRT_NAMES_AND_LIBRARY_PATHS": f"dumpref:{library}"}


@dataclass
class Size:
    lines: int                 # lines of minimal.c
    filled_in_source: list[str]  # the SLOT(...) rows of its table
    filled_in_library: int     # slots of the built table that are not the shared stub
    slots: int                 # slots of the PJRT_Api table
    full_lines: int            # lines of the full plugin's C files (plugin_c/*.c, *.h)
    full_lines_levels_1_2: int  # ... without the program reader and executables (level 3)
    full_implemented: int      # entry points the full plugin implements (measured by the map)

    def record(self, evidence) -> None:
        """The appendix's numbers: minimal.c's lines and filled slots, the full plugin's lines."""
        evidence.number("lines of minimal.c", self.lines)
        evidence.number("slots it fills (SLOT entries of its table)", len(self.filled_in_source))
        evidence.number("lines of the full plugin (plugin_c/*.c, *.h)", self.full_lines)
        evidence.number("... of them outside the program reader and executables (levels 1-2)",
                        self.full_lines_levels_1_2)


#: The full plugin's files that serve level 3 only: the program reader and the executables.
LEVEL3_FILES = ("executable.c", "prog")


def size(minimal_library: Path, full_implemented: int) -> Size:
    from .abi import PjrtApi
    text = source_path().read_text()
    table = text[text.index("static PJRT_Api api = {"):]
    filled = re.findall(r"SLOT\((\w+)\)", table[:table.index("};")])
    api = PjrtApi(minimal_library)
    addresses = Counter(int(api.ffi.cast("uintptr_t", api.slot(n))) for n in api.slot_names)
    shared, _ = addresses.most_common(1)[0]  # the one `unimplemented` every other slot holds
    full = [p for p in sorted(plugin_source_dir().iterdir()) if p.suffix in (".c", ".h")]
    count = lambda ps: sum(len(p.read_text().splitlines()) for p in ps)  # noqa: E731
    return Size(lines=len(text.splitlines()), filled_in_source=["PJRT_" + f for f in filled],
                filled_in_library=sum(k for a, k in addresses.items() if a != shared),
                slots=len(api.slot_names), full_lines=count(full),
                full_lines_levels_1_2=count(p for p in full if not p.name.startswith(LEVEL3_FILES)),
                full_implemented=full_implemented)


def run_levels(library: Path, numbers=(1, 2, 3)) -> dict:
    """Level number -> the JaxRun of its snippet against `library`, registered plainly."""
    from .trace import run_jax
    return {lv.number: run_jax(library, lv.code, trace=False, env=plain_registration(library))
            for lv in LEVELS if lv.number in numbers}


@dataclass(frozen=True)
class Edit:
    name: str
    rule: str      # what the edit tests
    find: str      # the line of minimal.c as it stands
    replace: str   # the line as edited
    level: int     # the level snippet run against the edited copy


EDITS = (
    Edit("NULL slot jax calls",
         "a slot jax calls must hold a function: left NULL, jaxlib calls it anyway",
         "    if (*slot == NULL) *slot = (any_fn)unimplemented;",
         "    if (*slot == NULL && slot != (any_fn*)&api.PJRT_Client_TopologyDescription) *slot = (any_fn)unimplemented;",
         1),
    Edit("NULL slot jax never calls",
         "a slot outside the called set may stay NULL",
         "    if (*slot == NULL) *slot = (any_fn)unimplemented;",
         "    if (*slot == NULL && slot != (any_fn*)&api.PJRT_Client_DmaMap) *slot = (any_fn)unimplemented;",
         2),
    Edit("BufferFromHostBuffer without its event",
         "whether the host-to-device transfer must hand back done_with_host_buffer",
         "  a->done_with_host_buffer = &ready; /* jax waits on it (OnReady) before freeing its copy */",
         "  a->done_with_host_buffer = NULL;",
         2),
    Edit("ToHostBuffer without its event",
         "whether the device-to-host transfer must hand back its event",
         "  a->event = &ready;",
         "  a->event = NULL;",
         2),
    Edit("API version 0.0",
         "the table's pjrt_api_version must not be older than the minimum jax supports",
         "                         .major_version = PJRT_API_MAJOR, .minor_version = PJRT_API_MINOR},",
         "                         .major_version = PJRT_API_MAJOR, .minor_version = 0},",
         1),
    Edit("API major version 1",
         "the table's major version must be jax's",
         "                         .major_version = PJRT_API_MAJOR, .minor_version = PJRT_API_MINOR},",
         "                         .major_version = 1, .minor_version = PJRT_API_MINOR},",
         1),
    Edit("table struct_size 0",
         "jax does not check the table's own struct_size",
         "    .struct_size = PJRT_Api_STRUCT_SIZE,",
         "    .struct_size = 0,",
         1),
    Edit("memory kind 'any name at all'",
         "the memory kind is a free string",
         '''static Err Memory_Kind(PJRT_Memory_Kind_Args* a) { STR(kind, "hbm"); return OK; }''',
         '''static Err Memory_Kind(PJRT_Memory_Kind_Args* a) { STR(kind, "any name at all"); return OK; }''',
         2),
    Edit("Memory_ToString answering UNIMPLEMENTED",
         "an error is not always survivable: jaxlib aborts the process when a memory's to_string fails",
         "    SLOT(Memory_DebugString), SLOT(Memory_ToString),",
         "    SLOT(Memory_DebugString),",
         1),
)


@dataclass
class EditResult:
    edit: Edit
    passed: bool       # level passed, clean exit
    checks_passed: bool  # the level's checks passed (maybe a failure at exit after)
    returncode: int
    why: str


def run_edit(edit: Edit, out_dir: Path) -> EditResult:
    from .trace import run_jax
    text = source_path().read_text()
    if text.count(edit.find) != 1:
        raise AssertionError(f"{source_path()}: the line to edit for {edit.name!r} is not there "
                             f"exactly once: {edit.find!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    edited = out_dir / "minimal.c"
    edited.write_text(text.replace(edit.find, edit.replace))
    built = build_plugin(out_dir, minimal=True, source=edited)
    level = next(lv for lv in LEVELS if lv.number == edit.level)
    run = run_jax(built.path, level.code, trace=False, env=plain_registration(built.path))
    return EditResult(edit, level_passed(run), level_checks_passed(run), run.returncode, run.why)


#: What a reader without this repository types (Study 3's appendix prints it), in a folder holding
#: only minimal.c and the level snippets.
READER_RECIPE = """\
# needs a C compiler, and in a fresh venv (python3 -m venv venv && . venv/bin/activate):
#   pip install jax==0.10.2 jaxlib==0.10.2 xla-cpu-pjrt==0.0.1
INCLUDE=$(python -c "import os, xla_plugins.xla_cpu_pjrt as x; print(os.path.join(list(x.__path__)[0], 'include'))")
cc -std=c11 -O2 -Wall -Wextra -fPIC -shared -I"$INCLUDE" -o libdumpref_minimal.so minimal.c
export PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:$PWD/libdumpref_minimal.so
python level1.py && python level2.py
# Registered so, the device is jax's default backend, and anything not placed elsewhere is
# compiled for it, which it refuses (jnp.ones(3) too); JAX_PLATFORMS=cpu,dumpref keeps the
# CPU the default and the device at jax.devices('dumpref').
"""


def run_reader_recipe(folder: Path, snippets: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """READER_RECIPE run as written in `folder`, which gets minimal.c and the `snippets`
    (file name -> text; by default level1.py and level2.py, the level snippets as they run);
    this package's switches are left out of the environment, so the device comes only from
    the recipe's own PJRT_NAMES_AND_LIBRARY_PATHS."""
    from .trace import as_run
    if snippets is None:
        snippets = {f"level{lv.number}.py": as_run(lv.code) for lv in LEVELS[:2]}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "minimal.c").write_text(source_path().read_text())
    for name, text in snippets.items():
        (folder / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DUMPREF_", "PJRT_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return subprocess.run(["bash", "-e", "-c", READER_RECIPE], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def attribute_counts(api) -> dict[str, int]:
    """How many plugin and device attributes a library reports, asked through cffi."""
    client = api.create_client()
    try:
        desc = api.call("PJRT_Device_GetDescription", device=api.first_device(client)).device_description
        return {"plugin": api.call("PJRT_Plugin_Attributes").num_attributes,
                "device": api.call("PJRT_DeviceDescription_Attributes",
                                   device_description=desc).num_attributes}
    finally:
        api.destroy_client(client)


# One-line edits of plugin_c/minimal/minimal.c for the contract's rules that the appendix's
# edits (minimal.EDITS) do not cover.
CONTRACT_EDITS = (
    Edit("GetPjrtApi hidden", "the library must export GetPjrtApi (jax dlsym's it)",
                 '__attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi(void) {',
                 '__attribute__((visibility("hidden"))) const PJRT_Api* GetPjrtApi(void) {', 1),
    Edit("Error_Destroy reads its error", "PJRT_Error_Destroy must accept NULL",
                 "static void Error_Destroy(PJRT_Error_Destroy_Args* a) { free(a->error); }",
                 "static void Error_Destroy(PJRT_Error_Destroy_Args* a) { if (a->error->code != PJRT_Error_Code_OK) free(a->error); }",
                 2),
    Edit("OnReady never calls back", "OnReady must call its callback (at once, for a ready event)",
                 "static Err Event_OnReady(PJRT_Event_OnReady_Args* a) { a->callback(OK, a->user_arg); return OK; }",
                 "static Err Event_OnReady(PJRT_Event_OnReady_Args* a) { (void)a; return OK; }", 2),
)
EDIT_TIMEOUT_S = 30  # a level takes seconds; a hang is what one edit shows


def edited_minimal(tmp_path, name: str, find: str, replace: str):
    """minimal.c with one line replaced, built; a clear error when the line is not there once."""
    text = source_path().read_text()
    if text.count(find) != 1:
        raise AssertionError(f"{source_path()}: the line to edit for {name!r} is not there "
                             f"exactly once: {find!r}")
    folder = tmp_path / name.replace(" ", "-").replace("'", "")
    folder.mkdir(parents=True)
    (folder / "minimal.c").write_text(text.replace(find, replace))
    return build_plugin(folder, minimal=True, source=folder / "minimal.c")


def run_contract_edit(edit, tmp_path) -> EditResult:
    """A contract edit built and its level run; the run's temporary folder left out of ``why``."""
    from .pjrt_map import OK_MARK
    from .trace import run_jax
    built = edited_minimal(tmp_path, edit.name, edit.find, edit.replace)
    r = run_jax(built.path, LEVELS[edit.level - 1].code, trace=False,
                env=plain_registration(built.path), timeout=EDIT_TIMEOUT_S)
    # the library's folder is this run's temporary one: named by the file alone, so runs compare
    why = r.why.replace(str(built.path), built.path.name)
    return EditResult(edit, level_passed(r), OK_MARK in r.stdout, r.returncode, why)


MEMORY_KIND = "hbm"  # minimal.c's one memory kind (jax's default is "device")
MEMORY_KIND_LINE = ('static Err Memory_Kind(PJRT_Memory_Kind_Args* a) { STR(kind, "' + MEMORY_KIND
                    + '"); return OK; }')


REGISTERED_AS = """
import json
out = {"jax.devices()": str(jax.devices()), "jax.default_backend()": jax.default_backend()}
for name in NAMES:
    try:
        d = jax.devices(name)[0]
        out[f"jax.devices({name!r})"] = f"{d}, platform {d.platform!r}"
    except RuntimeError as e:
        out[f"jax.devices({name!r})"] = f"{type(e).__name__}: {str(e).split('. ')[0]}"
print(json.dumps(out))
"""


def registered_as(library, name: str, platform_name: str = "dumpref") -> dict:
    """What jax answers when ``library`` (whose PlatformName is ``platform_name``) is registered
    under another ``name`` in PJRT_NAMES_AND_LIBRARY_PATHS: asked by either name."""
    import json
    from .trace import run_jax
    code = REGISTERED_AS.replace("NAMES", repr((name, platform_name)))
    run = run_jax(library, code, trace=False,
                  env={"DUMPREF_PJRT": "0", "PJRT_NAMES_AND_LIBRARY_PATHS": f"{name}:{library}"})
    if not run.ok:
        raise AssertionError(f"registered as {name!r}: {run.why}\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


# ---- what Study 3 records of these runs ------------------------------------------------------

def error_messages() -> list[str]:
    """The message argument of every ``return error(code, message)`` in minimal.c, as written
    (the contract's note says they are all string literals, which jax may keep without a copy)."""
    return re.findall(r"return error\(\w+, ([^)]*)\)", source_path().read_text())


def run_all_edits(tmp_path: Path) -> list[EditResult]:
    """Every one-line edit, the appendix's (EDITS) then the contract's (CONTRACT_EDITS), built
    and run on its level, in that order."""
    return ([run_edit(e, tmp_path / f"edit{i}") for i, e in enumerate(EDITS)]
            + [run_contract_edit(e, tmp_path) for e in CONTRACT_EDITS])


def edit_rows(results: list[EditResult]) -> list[dict]:
    """One row per edit: the rule it tests, the line as edited, and how its level ended."""
    return [{"edit": r.edit.name, "rule tested": r.edit.rule, "edited to": r.edit.replace.strip(),
             "level": r.edit.level, "level passed": "yes" if r.passed else "no",
             "how the run ended": r.why} for r in results]


def level_rows(runs: dict) -> list[dict]:
    """run_levels' result as rows: each level, its goal, whether it passed and how it ended."""
    return [{"level": n, "goal": LEVELS[n - 1].goal, "passed": "yes" if level_passed(r) else "no",
             "how it ended": r.why} for n, r in runs.items()]


def table_note(size: Size, needed: set, error_channel, api) -> str:
    """What the appendix says of minimal.c's PJRT_Api table: the slots it fills, its own fields
    as the built library reports them beside the header's, and the file's hash."""
    import hashlib
    return (f"The {len(size.filled_in_source)} slots it fills are the {len(needed - set(error_channel))} "
            f"entry points levels 1 and 2 need and the {len(error_channel)} of the error channel ("
            + ", ".join(sorted(error_channel)) + "). Its PJRT_Api table: struct_size = "
            f"{api.struct_size} (the header's PJRT_Api_STRUCT_SIZE: "
            f"{api.header_struct_size('PJRT_Api')}), pjrt_api_version {api.version[0]}."
            f"{api.version[1]} (the header's PJRT_API_MAJOR.PJRT_API_MINOR), extension_start "
            "NULL. To check a copy of minimal.c below: sha256 "
            + hashlib.sha256(source_path().read_bytes()).hexdigest() + " (the file as "
            "shown, ending in one newline).")


def jax_view_note(shown: dict, attributes: dict) -> str:
    """What jax shows of the minimal device (JAX_VIEW_CODE's output) and its attribute counts."""
    return (f"jax's view of it: platform {shown['d.platform']!r}, memory kind "
            f"{shown['d.default_memory().kind']!r} (the file's \"hbm\": the kind is a free "
            f"string), repr {shown['repr(d)']!r}; it reports {attributes['plugin']} plugin "
            f"and {attributes['device']} device attributes (asked through cffi), and jax "
            "accepts both.")


HOW_TO_READ = (
    "How to read it: the contract above says what every entry point takes, fills and "
    "returns; the objects behind the handles are the plugin's own structs. To see "
    "what each entry point is for, "
    "remove its SLOT(name) entry from the table (a line of the table may hold "
    "several; the compiler then warns that the function is unused): that is the "
    "knock-out the level tables above were measured with, and the level then fails "
    "as their 'why' column says.")

#: The contract, said in words once every rule of it has been measured (the contract claim).
CONTRACT_IN_WORDS = (
    "In words. Build the device as a shared library (cc -shared -fPIC) whose one exported "
    "function is const PJRT_Api* GetPjrtApi(void): under -fvisibility=hidden mark it "
    '__attribute__((visibility("default"))); without that flag, make every other function '
    "static. Every entry point takes one PJRT_X_Args* (jax fills the inputs and struct_size, "
    "the device the fields pjrt_c_api.h marks // out) and returns NULL or an error the device "
    "allocated; jax reads it with PJRT_Error_GetCode and PJRT_Error_Message (the message lives "
    "until PJRT_Error_Destroy: a message built at run time must be copied into the error, "
    "minimal.c's are all string literals) and frees it with PJRT_Error_Destroy, which must "
    "accept NULL. "
    "Fill every slot: one function answering UNIMPLEMENTED serves the slots not needed. An "
    "event ready when made: OnReady calls callback(NULL, user_arg) before it returns (NULL: "
    "no error), Event_Error returns NULL, IsReady says true. Pointers: what the owner column "
    "gives to jax, jax destroys once for each time it was handed out, so hand out a fresh "
    "object each call, or one shared object whose Destroy does nothing (minimal.c's one ready "
    "event); every other pointer (device, memory and attribute arrays, strings, dims) stays "
    "valid as long as the object it came from. "
    "Delete drops an array's data but keeps the handle (IsDeleted then says true); Destroy "
    "frees the handle. Arrays arrive with byte_strides (numpy's, bytes per dimension; NULL: "
    "dense row-major): copy element by element into the device's own layout, as minimal.c's "
    "Client_BufferFromHostBuffer does.")
