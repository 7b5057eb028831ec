"""The measured map of what PJRT requires, level by level.

For each level (a jax snippet that must succeed):
  calls        the entry points jax calls, in call order (the plugin's call trace), each with
               the fields jax set and the fields the device filled (decoded by :mod:`.calls`);
  called       every entry point in the trace must be a real function (jaxlib calls a slot
               without checking it for NULL); the ones not needed may answer UNIMPLEMENTED;
  needed       the implemented entry points the level cannot do without: each called one is
               "knocked out" in turn (DUMPREF_PJRT_DISABLE makes it answer UNIMPLEMENTED at
               once), and it is needed when the level then fails; the failure (exception
               message or abort) is kept as its "why".  A knock-out after which the level's
               checks all passed but the process then died at exit is kept apart (at_exit);
  first need   the needed entry points in the order the trace first calls them;
  sufficiency  one more run with every implemented entry point *outside* the needed set knocked
               out at once: the level must still pass.
Nothing here is typed by hand: which entry points are implemented is itself measured, by calling
every slot of the table through cffi with NULL args (an implemented one answers
INVALID_ARGUMENT, a stub UNIMPLEMENTED).  The error functions cannot be knocked out (they return
void or are the error channel itself); when jax calls them the map says whose error they read.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

#: Printed by a level's snippet once every check in it passed, flushed at once: a knock-out that
#: aborts the process at exit must not take the mark with it (stdout is a pipe, so buffered).
OK_MARK = "DUMPREF-LEVEL-OK"


@dataclass(frozen=True)
class Level:
    number: int
    name: str
    goal: str
    code: str


LEVELS = (
    # A reader's first steps, not the fewest calls: printing the device and its memories (jaxlib
    # aborts the process when a memory's strings fail) and waiting on a buffer (when its ready
    # event fails) are what the first user of a new device does.
    Level(1, "device", 'jax.devices("dumpref") lists the device, and it and its memories print',
          "devs = jax.devices('dumpref')\n"
          "assert len(devs) == 1 and devs[0].platform == 'dumpref', devs\n"
          "print(devs, devs[0].default_memory(), devs[0].addressable_memories())\n"
          f"print({OK_MARK!r}, flush=True)\n"),
    Level(2, "buffers", "device_put, block_until_ready and np.asarray round trips, then delete",
          "dev = jax.devices('dumpref')[0]\n"
          "print(jax.devices('dumpref'), dev.default_memory(), dev.addressable_memories())\n"
          "arrays = [np.arange(12, dtype=np.float32).reshape(3, 4).T, np.array(7, np.int8),\n"
          "          np.zeros((0, 3), bool), np.arange(6).astype(jnp.bfloat16)]\n"
          "for a in arrays:\n"
          "    x = jax.device_put(a, dev).block_until_ready()\n"
          "    assert x.devices() == {dev} and x.is_ready(), x.devices()\n"
          "    back = np.asarray(x)\n"
          "    assert back.dtype == a.dtype and back.shape == a.shape and (back == a).all(), (a, back)\n"
          "    x.delete()\n"
          "    assert x.is_deleted()\n"
          f"print({OK_MARK!r}, flush=True)\n"),
    Level(3, "programs", "jax.jit(f)(x) compiles and runs on the device, matching numpy",
          "dev = jax.devices('dumpref')[0]\n"
          "a = np.arange(6, dtype=np.float32).reshape(2, 3)\n"
          "y = jax.jit(lambda t: jnp.tanh(t) @ t.T + 1)(jax.device_put(a, dev))\n"
          "assert y.devices() == {dev}, y.devices()\n"
          "assert np.allclose(np.asarray(y), np.tanh(a) @ a.T + 1, rtol=1e-5), y\n"
          f"print({OK_MARK!r}, flush=True)\n"),
)

#: Level 2's arrays, as the study's notes name them (the snippet's list, in its order).
LEVEL2_ARRAYS = "f32[4,3] (transposed view), s8[] (0-d), pred[0,3] (empty), bf16[6]"

#: Entry points that cannot be knocked out: they return void or carry the errors themselves.
ERROR_CHANNEL = ("PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode")


def implemented_entry_points(api) -> list[str]:
    """Slots that are real implementations, measured: NULL args -> INVALID_ARGUMENT."""
    out = []
    for name in api.slot_names:
        if name in ERROR_CHANNEL:
            out.append(name)
            continue
        err = api.call_raw(name, api.ffi.NULL)
        if err == api.ffi.NULL:
            raise AssertionError(f"{name} accepted NULL args without an error")
        e = api.take_error(name, err)
        if e.code_name == "INVALID_ARGUMENT":
            out.append(name)
        elif e.code_name != "UNIMPLEMENTED":
            raise AssertionError(f"{name} answered NULL args with {e}")
    return out


def first_occurrences(trace: list[str]) -> list[str]:
    seen, out = set(), []
    for name in trace:
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def in_table_order(names) -> list[str]:
    """`names` in the order of the PJRT_Api table's slots (the header's order)."""
    from .abi import _ffi
    order = {name: i for i, (name, _) in enumerate(_ffi().typeof("PJRT_Api").fields)}
    return sorted(names, key=lambda n: order.get(n, len(order)))


def level_passed(run) -> bool:
    return run.ok and OK_MARK in run.stdout


def level_checks_passed(run) -> bool:
    """The snippet printed its mark: every check of the level passed, whatever came at exit."""
    return OK_MARK in run.stdout


def _show(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)


def _distinct(field_dicts: list[dict]) -> str:
    """"field = a / b" per field, distinct values in order of appearance; '*' marks what the
    device noted about memory behind a pointer (dims, byte strides, layouts)."""
    values: dict[str, list[str]] = {}
    for d in field_dicts:
        for k, v in d.items():
            shown = values.setdefault(k, [])
            text = _show(v)
            if text not in shown:
                shown.append(text)
    parts = []
    for k, vs in values.items():
        more = f" / ... ({len(vs)} values)" if len(vs) > 4 else ""
        parts.append(f"{k} = {' / '.join(vs[:4])}{more}")
    return "; ".join(parts)


@dataclass
class Need:
    entry_point: str
    first_call: int   # index in the level's trace
    why: str          # how the level broke without it
    at_exit: bool = False  # the level's checks passed; the process died afterwards, at exit


@dataclass
class LevelMap:
    level: Level
    calls: list[str]                 # full trace, in call order
    needed: list[Need]               # in order of first need
    not_needed: dict[str, str]       # called, implemented, knocked out, level still passed
    error_reads: dict[str, str]      # error-channel entry point -> whose errors it read
    unimplemented_called: list[str]  # stubs jax called (their UNIMPLEMENTED was tolerated)
    sufficient: bool                 # passed with everything outside `needed` knocked out
    sufficiency_why: str = ""
    records: list = field(default_factory=list)  # calls.Call per call, in call order
    # (entry point, input field) whose value differed between runs of the same calls: fields
    # jax leaves unset, whose bytes are whatever its stack held (set by measure_map)
    unset: set = field(default_factory=set)
    samples: list = field(default_factory=list, repr=False)  # decoded traces of the knock-out runs

    @property
    def needed_names(self) -> list[str]:
        return [n.entry_point for n in self.needed]

    @property
    def called(self) -> list[str]:
        """Every entry point jax called, in order of first call: each must be a function."""
        return first_occurrences(self.calls)

    def tier(self, name: str) -> str:
        need = next((n for n in self.needed if n.entry_point == name), None)
        if need is not None:
            # (at exit or during the level is not shown here: for a handle jaxlib releases on a
            # thread of its own, such as level 3's executables, which one comes first varies)
            return "needed"
        if name in ERROR_CHANNEL:
            return "needed (error channel)"
        if name in self.unimplemented_called:
            return "called, may answer UNIMPLEMENTED (a stub in the full plugin)"
        return "called, may answer UNIMPLEMENTED (knocked out, level passed)"

    def tier_table(self, earlier: frozenset[str] | set[str] = frozenset()) -> list[dict]:
        """The entry points jax called, in the PJRT_Api table's order, each with its tier.  (The
        table's order, not the call order: at level 3 jaxlib's teardown order varies by run.)"""
        return [{"entry point": n, "calls": self.calls.count(n), "tier": self.tier(n),
                 "also at a lower level": "yes" if n in earlier else ""}
                for n in in_table_order(self.called)]

    def fill_table(self, only: set[str] | None = None) -> list[dict]:
        """Per entry point (in the table's order): the struct_size jax passed against the
        header's, the fields jax set and the fields the device filled, every distinct value."""
        rows = []
        for name in in_table_order(self.called):
            if only is not None and name not in only:
                continue
            calls = [c for c in self.records if c.fn == name]
            sizes = sorted({c.struct_size for c in calls if c.struct_size is not None})
            inputs = _distinct([{**{k: ("(unset by jax: differs between runs)"
                                        if (name, k) in self.unset else v)
                                    for k, v in c.inputs.items()},
                                 **{f"*{k}": v for k, v in c.notes.items()}} for c in calls])
            outputs = _distinct([c.outputs for c in calls if not c.error])
            answers = sorted({c.error or "OK" for c in calls})
            rows.append({"entry point": name, "calls": len(calls),
                         "struct_size (jax / header)": f"{'/'.join(map(str, sizes))} / {calls[0].header_size}" if calls else "",
                         "jax set": inputs or "(nothing but the header)",
                         "device filled": outputs or "(nothing)",
                         "answered": ", ".join(answers)})
        return rows


@dataclass
class PjrtMap:
    levels: list[LevelMap]
    implemented: list[str]
    runs: int = 0
    jax_view: dict = field(default_factory=dict)      # what jax shows of the device (JAX_VIEW)
    jax_view_calls: list = field(default_factory=list)  # the trace of that run, decoded

    def level(self, number: int) -> LevelMap:
        return next(m for m in self.levels if m.level.number == number)

    def first_need_table(self) -> list[dict]:
        """Every needed entry point, level by level, in the order it had to be filled."""
        rows: list[dict] = []
        seen: set = set()
        for m in self.levels:
            for need in m.needed:
                if need.entry_point in seen:
                    continue
                seen.add(need.entry_point)
                rows.append({"level": m.level.number, "order": len(rows) + 1,
                             "entry point": need.entry_point,
                             "struct": need.entry_point[len("PJRT_"):].split("_")[0],
                             "why (what broke without it)": need.why})
        return rows

    def summary_rows(self) -> list[dict]:
        """Per level: how many entry points jax calls, how many it needs (and how many of those
        are new), how many may answer UNIMPLEMENTED, and whether the needed ones alone suffice."""
        rows = []
        for lm in self.levels:
            n = lm.level.number
            rows.append({"level": n, "goal": lm.level.goal,
                         "entry points jax calls (must be functions)": len(lm.called),
                         "needed": len(lm.needed),
                         "new at this level": len([r for r in self.first_need_table() if r["level"] == n]),
                         "called, not needed (may answer UNIMPLEMENTED)":
                             len([x for x in lm.called if x not in lm.needed_names and x not in ERROR_CHANNEL]),
                         "passes with only the needed ones": "yes" if lm.sufficient else "no: " + lm.sufficiency_why})
        return rows

    def record_level(self, evidence, number: int) -> tuple[LevelMap, list[dict]]:
        """Record one level's folded tables: every entry point jax called with its tier (and, for
        the ones first needed here, the order they had to be filled in and what broke without
        each), and what each new entry point was sent and filled.  Returns the level's map and
        its first-need rows in order."""
        m = self.level(number)
        rows = [r for r in self.first_need_table() if r["level"] == number]
        earlier = {n for lm in self.levels if lm.level.number < number for n in lm.called}
        need = {r["entry point"]: r for r in rows}
        evidence.table(f"Level {number} ({m.level.goal}): every entry point jax called, in the "
                       "PJRT_Api table's order, its tier, and for those first needed here the order "
                       "they had to be filled in and what broke without each", [
                           {**t, "order filled": need[t["entry point"]]["order"] if t["entry point"] in need else "",
                            "why (what broke without it)": need[t["entry point"]]["why (what broke without it)"]
                            if t["entry point"] in need else ""}
                           for t in m.tier_table(earlier)], fold=True)
        evidence.table(f"Level {number}, what each entry point new at this level was sent and filled "
                       "in the run (every distinct value; a pointer shows NULL, the earlier output it "
                       "came from, or set: what a set one points to and who owns it is the contract's "
                       "pointer table; * marks what the device noted about memory behind a pointer; "
                       "in the table's order)", m.fill_table(only=set(m.called) - earlier), fold=True)
        return m, sorted(rows, key=lambda r: r["order"])

    def struct_rows(self) -> list[dict]:
        """The PJRT objects in the order the device had to fill them: the first level and entry
        point that needed each, and how many of its entry points are needed."""
        seen: dict[str, int] = {}
        structs: list[dict] = []
        for r in self.first_need_table():
            key = r["struct"]
            if key not in seen:
                seen[key] = len(structs)
                structs.append({"first level": r["level"], "struct": f"PJRT_{key}",
                                "first needed entry point": r["entry point"], "entry points needed": 0})
            structs[seen[key]]["entry points needed"] += 1
        return structs

    def level3_note(self) -> str:
        """Which of the entry points levels 1 and 2 need level 3's snippet needs, never calls,
        or calls without needing."""
        earlier = set(self.level(1).needed_names) | set(self.level(2).needed_names)
        m3 = self.level(3)
        not_needed = sorted(earlier - set(m3.needed_names))
        uncalled = [n for n in not_needed if n not in m3.called]
        return (f"Of the {len(earlier)} entry points levels 1 and 2 need, level 3's snippet needs "
                f"{len(earlier) - len(not_needed)}"
                + (f"; it never calls {', '.join(uncalled)}" if uncalled else "")
                + (f"; it calls but does not need {', '.join(n for n in not_needed if n not in uncalled)}"
                   if len(uncalled) < len(not_needed) else "") + ".")

    def tiers_note(self) -> str:
        """How the two tiers are measured, and why they are this plugin's (its memory kind, read
        from the level-1 trace)."""
        (memory_kind,) = {c.outputs["kind"] for c in self.level(1).records if c.fn == "PJRT_Memory_Kind"}
        return ("Two tiers. Every entry point jax calls must be a real function (jaxlib calls a "
                "slot without checking it for NULL); of those, the needed ones must also succeed, "
                "the others may answer UNIMPLEMENTED. Needed is measured by a knock-out: "
                "DUMPREF_PJRT_DISABLE=PJRT_Name (plugin_c/hooks.c) makes that entry point answer "
                "UNIMPLEMENTED, and the level is run again; the error channel (PJRT_Error_*) "
                f"cannot be knocked out. Level 2's arrays: {LEVEL2_ARRAYS}; level 3's snippet: "
                "jnp.tanh(t) @ t.T + 1 on f32[2,3]. The tiers are this plugin's: its memory kind "
                f"is {memory_kind} (PJRT_Memory_Kind in the level-1 trace), which is why "
                "OutputMemoryKinds may answer UNIMPLEMENTED here; on a device with another kind "
                "it is needed ('Level 3 from the page' measures both).")

    def snippets_listing(self) -> str:
        """The level snippets, each as it runs in a fresh Python (the prelude first)."""
        from .trace import as_run
        return "".join(f"# level{lm.level.number}.py: {lm.level.goal}\n" + as_run(lm.level.code) + "\n"
                       for lm in self.levels)


def _error_reads(trace: list[str]) -> dict[str, str]:
    """For each error-channel call, the entry point whose error it read (the last non-error
    call before it)."""
    reads: dict[str, set[str]] = {}
    last = None
    for name in trace:
        if name in ERROR_CHANNEL:
            if last is not None:
                reads.setdefault(name, set()).add(last)
        else:
            last = name
    return {k: ", ".join(sorted(v)) for k, v in reads.items()}


def measure_level(plugin, level: Level, implemented: list[str], *, workers: int = 2) -> tuple[LevelMap, int]:
    base = plugin.run_jax(level.code)
    if not level_passed(base):
        raise AssertionError(f"level {level.number} ({level.goal}) fails with every entry point "
                             f"in place: {base.why}\n{base.stderr[-2000:]}")
    calls = base.trace
    order = first_occurrences(calls)
    impl = set(implemented)
    candidates = [n for n in order if n in impl and n not in ERROR_CHANNEL]

    def knock(name):  # traced too: more samples of the fields jax leaves unset
        return name, plugin.run_jax(level.code, disable=[name])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(pool.map(knock, candidates))
    needed, not_needed = [], {}
    for name in candidates:
        run = results[name]
        if level_passed(run):
            not_needed[name] = "level passed without it"
        else:
            needed.append(Need(name, calls.index(name), run.why,
                               at_exit=level_checks_passed(run)))
    needed.sort(key=lambda n: n.first_call)
    # Sufficiency: everything implemented but not needed goes at once (the error channel stays:
    # it cannot be knocked out).
    outside = [n for n in implemented if n not in {x.entry_point for x in needed}
               and n not in ERROR_CHANNEL]
    alone = plugin.run_jax(level.code, disable=outside, trace=False)
    stubs_called = [n for n in order if n not in impl]
    m = LevelMap(level=level, calls=calls, needed=needed, not_needed=not_needed,
                 error_reads=_error_reads(calls),
                 unimplemented_called=stubs_called, sufficient=level_passed(alone),
                 sufficiency_why="" if level_passed(alone) else alone.why,
                 records=base.calls(plugin.path),
                 samples=[r.calls(plugin.path) for r in results.values()])
    return m, 2 + len(candidates)


#: What jax shows of the values the device filled: (entry point, output field, where jax shows
#: it, the expression on device d).  The pairing is the question; both values are measured.
JAX_VIEW = (
    ("PJRT_Client_PlatformName", "platform_name", "d.platform"),
    ("PJRT_Client_PlatformVersion", "platform_version", "d.client.platform_version"),
    ("PJRT_DeviceDescription_Kind", "device_kind", "d.device_kind"),
    ("PJRT_DeviceDescription_Id", "id", "d.id"),
    ("PJRT_DeviceDescription_ProcessIndex", "process_index", "d.process_index"),
    ("PJRT_Device_LocalHardwareId", "local_hardware_id", "d.local_hardware_id"),
    ("PJRT_DeviceDescription_DebugString", "debug_string", "str(d)"),
    ("PJRT_DeviceDescription_ToString", "to_string", "repr(d)"),
    ("PJRT_Memory_Kind", "kind", "d.default_memory().kind"),
    ("PJRT_Memory_DebugString", "debug_string", "str(d.default_memory())"),
    ("PJRT_Memory_ToString", "to_string", "repr(d.default_memory())"),
    ("PJRT_Client_Devices", "num_devices", "len(jax.devices('dumpref'))"),
)

JAX_VIEW_CODE = ("import json\nd = jax.devices('dumpref')[0]\n"
                 "print(json.dumps({" + ", ".join(f"{e!r}: {e}" for _, _, e in JAX_VIEW)
                 + "}))\n")


def _unset_inputs(runs: list[list], names: list[str]) -> set:
    """Input fields of the first call of each entry point in `names` (the device listing, which
    every run begins with) whose value is not the same in every run (a knock-out run that died
    before a call simply has no sample of it)."""
    seen: dict[tuple[str, str], set] = {}
    for calls in runs:
        # up to the knocked-out call: before it, a knock-out run is the level's own run
        cut = next((i for i, c in enumerate(calls) if c.knocked_out), len(calls))
        calls = calls[:cut]
        for name in names:
            first = next((c for c in calls if c.fn == name), None)
            for k, v in (first.inputs.items() if first else ()):
                seen.setdefault((name, k), set()).add(str(v))
    return {key for key, values in seen.items() if len(values) > 1}


def measure_jax_view(plugin) -> tuple[dict, list]:
    run = plugin.run_jax(JAX_VIEW_CODE)
    if not run.ok:
        raise AssertionError(f"jax's view of the device could not be read: {run.why}")
    return json.loads(run.stdout.strip().splitlines()[-1]), run.calls(plugin.path)


def jax_view_table(view: dict, calls: list) -> list[dict]:
    """Each output the device filled beside what jax shows for it."""
    rows = []
    for fn, fieldname, expr in JAX_VIEW:
        filled = next((c.outputs.get(fieldname) for c in calls
                       if c.fn == fn and fieldname in c.outputs), None)
        device_value = filled[1:-1] if isinstance(filled, str) and filled[:1] == "'" else filled
        shown = view.get(expr)
        if shown == device_value:
            relation = "the same"
        elif isinstance(shown, str) and isinstance(device_value, str) and shown.endswith(device_value):
            relation = f"jax puts {shown[:-len(device_value)]!r} in front"
        else:
            relation = "differs"
        rows.append({"entry point": fn, "field": fieldname, "device filled": _show(device_value),
                     "jax shows it as": expr, "jax's value": _show(shown), "relation": relation})
    return rows


def _all_calls(pmap: PjrtMap, fn: str) -> list:
    return [c for lm in pmap.levels for c in lm.records if c.fn == fn]


def sent_facts(pmap: PjrtMap, transposed_strides: list[int]) -> list[dict]:
    """What jax sent and accepted, read off the decoded traces of every level: each row says
    what was looked at, what the runs showed, and whether the rule holds in them."""
    rows = []

    def fact(what, measured, holds):
        rows.append({"what jax does": what, "measured in the traces": measured,
                     "holds": "yes" if holds else "NO"})

    every = [c for lm in pmap.levels for c in lm.records]
    off = sorted({f"{c.fn} ({c.struct_size} vs {c.header_size})" for c in every
                  if c.struct_size is not None and c.struct_size != c.header_size})
    fact("passes struct_size = the header's <Args>_STRUCT_SIZE (end of the last field, not sizeof)",
         f"{len(every)} calls, {len(off)} with another size" + (": " + ", ".join(off) if off else ""),
         not off)
    asked = sorted({c.inputs.get("id") for c in _all_calls(pmap, "PJRT_Client_LookupDevice")})
    returned = sorted({c.outputs.get("id") for c in _all_calls(pmap, "PJRT_DeviceDescription_Id")})
    fact("asks PJRT_Client_LookupDevice for the id PJRT_DeviceDescription_Id returned",
         f"ids asked {asked}, ids returned {returned}", bool(asked) and set(asked) <= set(returned))
    attrs = sorted({c.outputs.get("num_attributes") for c in _all_calls(pmap, "PJRT_DeviceDescription_Attributes")})
    fact("accepts a device with zero attributes (PJRT_DeviceDescription_Attributes)",
         f"num_attributes filled: {attrs}; every level passed", attrs == [0])
    puts = _all_calls(pmap, "PJRT_Client_BufferFromHostBuffer")
    fact("names the destination of a host-to-device copy by memory, not device",
         f"{len(puts)} calls: device = {sorted({c.inputs.get('device') for c in puts})}, memory from "
         f"{sorted({str(c.inputs.get('memory')).split('.')[0] for c in puts})}",
         bool(puts) and all(c.inputs.get("device") == "NULL" and c.inputs.get("memory") != "NULL" for c in puts))
    fact("passes device_layout = NULL (no layout asked of the device)",
         f"device_layout = {sorted({c.inputs.get('device_layout') for c in puts})}",
         bool(puts) and all(c.inputs.get("device_layout") == "NULL" for c in puts))
    first = pmap.level(2).records
    first_put = next(c for c in first if c.fn == "PJRT_Client_BufferFromHostBuffer")
    fact("hands a transposed numpy view over as byte strides (numpy's own), not as a copy",
         f"level 2's f32[4,3] view: byte_strides {first_put.notes.get('byte_strides')}, "
         f"numpy's strides {transposed_strides}",
         first_put.notes.get("byte_strides") == transposed_strides)
    gets = _all_calls(pmap, "PJRT_Buffer_ToHostBuffer")
    layouts = {json.dumps(c.notes.get("host_layout")) for c in gets}
    row_major = all(c.notes.get("host_layout.minor_to_major")
                    == list(range(len(c.notes.get("host_layout.minor_to_major", [])) - 1, -1, -1))
                    for c in gets)
    fact("passes ToHostBuffer a host_layout: tiled, no tiles, minor_to_major = rank-1 .. 0 "
         "(dense row-major)", f"{len(gets)} calls: {', '.join(sorted(layouts))}; row-major: {row_major}",
         bool(gets) and row_major and all(c.inputs.get("host_layout") != "NULL"
                                          and (c.notes.get("host_layout") or {}).get("num_tiles") == 0
                                          for c in gets))
    sizing = [c for c in gets if c.inputs.get("dst") == "NULL"]
    fact("never asked for the size with dst = NULL in these levels (the header allows it)",
         f"{len(sizing)} of {len(gets)} calls had dst = NULL", not sizing)
    events = sorted({c.fn for c in every if c.fn.startswith("PJRT_Event_")})
    fact("never blocks on an event (PJRT_Event_Await): it registers a callback (OnReady) or asks "
         "(IsReady, Error)", ", ".join(events), "PJRT_Event_Await" not in events)
    return rows


_CACHE: dict[str, PjrtMap] = {}


def measure_map(plugin, levels=LEVELS, *, workers: int = 2) -> PjrtMap:
    """The map for `plugin` (a BuiltPlugin), measured once per process and library hash."""
    key = plugin.sha256 + ":" + ",".join(str(lv.number) for lv in levels)
    if key not in _CACHE:
        implemented = implemented_entry_points(plugin.api)
        maps, runs = [], 0
        for level in levels:
            m, n = measure_level(plugin, level, implemented, workers=workers)
            maps.append(m)
            runs += n
        view, view_calls = measure_jax_view(plugin)
        unset = _unset_inputs([m.records for m in maps] + [view_calls]
                              + [calls for m in maps for calls in m.samples], maps[0].called)
        for m in maps:
            m.unset = unset
        _CACHE[key] = PjrtMap(levels=maps, implemented=implemented, runs=runs + 1,
                              jax_view=view, jax_view_calls=view_calls)
    return _CACHE[key]


# ---- the contract the tables of needs do not show: exports, return types, ownership ---------

def exported_symbols(library) -> list[str]:
    """The functions a library exports (its dynamic symbol table, read by binutils' nm)."""
    import shutil
    import subprocess
    nm = shutil.which("nm")
    if nm is None:
        raise RuntimeError("nm (binutils) is needed to read a library's exported symbols")
    done = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True,
                          text=True, check=True)
    return sorted(line.split()[-1] for line in done.stdout.splitlines()
                  if len(line.split()) == 3 and line.split()[1] in "TW")


def slot_return_types() -> dict[str, str]:
    """PJRT_Api slot -> the C return type of its function, from the real header (cffi)."""
    from .abi import _ffi
    out = {}
    for name, f in _ffi().typeof("PJRT_Api").fields:
        if f.type.kind == "function":
            out[name] = f.type.result.cname.replace(" *", "*")
    return out


def _header_text() -> str:
    from .build import header_dir
    return (header_dir() / "pjrt_c_api.h").read_text()


def field_comments() -> dict[str, str]:
    """"PJRT_X.field" -> the header's comment on that field of PJRT_X_Args (the // lines just
    above it and what follows its // out mark), '' when the header says nothing."""
    import re
    out = {}
    for m in re.finditer(r"^struct (\w+)_Args \{(.*?)^\};", _header_text(), re.DOTALL | re.MULTILINE):
        pending: list[str] = []
        for line in m.group(2).splitlines():
            text = line.strip()
            if text.startswith("//"):
                pending.append(text[2:].strip())
                continue
            fm = re.match(r"[^/;]*?(\w+)\s*(?:\[[^\]]*\])?;\s*(?://\s*(.*))?$", text)
            if fm:
                tail = re.sub(r"^(in/)?out\b\.?\s*", "", fm.group(2) or "").strip()
                out[f"{m.group(1)}.{fm.group(1)}"] = " ".join(pending + ([tail] if tail else []))
            pending = [] if text else pending
    return out


def function_comment(entry_point: str) -> str:
    """The header's comment above ``typedef ... entry_point(...)``."""
    import re
    lines = _header_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if re.match(rf"typedef .*\b{entry_point}\(", ln))
    doc: list[str] = []
    for ln in reversed(lines[:at]):
        if not ln.startswith("//"):
            break
        doc.insert(0, ln[2:].strip())
    return " ".join(doc)


def delete_destroy_rows(calls) -> list[dict]:
    """PJRT_Buffer_Delete against PJRT_Buffer_Destroy in ``calls``: how often jax called each,
    and the real header's comment on each."""
    return [{"entry point": fn, "calls": sum(1 for c in calls if c.fn == fn),
             "the header says": function_comment(fn)}
            for fn in ("PJRT_Buffer_Delete", "PJRT_Buffer_Destroy")]


def pointer_outputs(pmap: PjrtMap) -> list[dict]:
    """Every pointer the device filled in levels 1-3 (the fill tables show it as 'set' or as an
    earlier output), in order of first fill, with what jax did with it in the traces."""
    from .abi import _ffi
    ffi = _ffi()
    comments = field_comments()
    every = [(lm.level.number, c) for lm in pmap.levels for c in lm.records]
    rows: dict[str, dict] = {}
    for level, c in every:
        for k, v in c.outputs.items():
            key = f"{c.fn}.{k}"
            if key in rows or not isinstance(v, str) or not (v == "set" or v.startswith("PJRT_")):
                continue
            if v.startswith(("PJRT_Buffer_Type_", "PJRT_Error_Code_")):
                continue
            ctype = dict(ffi.typeof(f"{c.fn}_Args").fields)[k].type.cname
            back = sorted({d.fn for _, d in every if key in d.inputs.values()})
            freed = [f for f in back if f.endswith("_Destroy")]
            if c.inputs.get(k) not in (None, "NULL"):
                owner = "jax: it passes its own array, the device writes into it"
            elif freed:
                owner = "jax, with " + ", ".join(freed)
            else:
                owner = "the device (jax frees it with nothing)"
            rows[key] = {"level": level, "output": key, "C type": ctype,
                         "jax passes it back to": ", ".join(f for f in back if f not in freed) or "-",
                         "owner": owner, "the header says": comments.get(f"{c.fn}.{k}", "") or "-"}
    return list(rows.values())


def error_destroys_of_null(calls) -> list[str]:
    """For each PJRT_Error_Destroy jax called with error = NULL, the entry point before it."""
    out, before = [], None
    for c in calls:
        if c.fn == "PJRT_Error_Destroy" and c.inputs.get("error") == "NULL":
            out.append(f"{before.fn} (answered {before.error or 'NULL'})" if before else "?")
        if not c.fn.startswith("PJRT_Error_"):
            before = c
    return out


def compressed_calls(calls):
    """Consecutive repeats folded: the call order stays readable."""
    rows = []
    for name in calls:
        if rows and rows[-1][0] == name:
            rows[-1][1] += 1
        else:
            rows.append([name, 1])
    return [{"#": i + 1, "entry point": n, "times in a row": k} for i, (n, k) in enumerate(rows)]
