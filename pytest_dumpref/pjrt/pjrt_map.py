"""The measured map of what PJRT requires, level by level.

For each level (a jax snippet that must succeed):
  calls        the entry points jax calls, in call order (the plugin's call trace);
  needed       the implemented entry points the level cannot do without: each called one is
               knocked out in turn (DUMPREF_PJRT_DISABLE), and it is needed when the level then
               fails; the failure (exception message or abort) is kept as its "why";
  first need   the needed entry points in the order the trace first calls them;
  sufficiency  one more run with every implemented entry point *outside* the needed set knocked
               out at once: the level must still pass.
Nothing here is typed by hand: which entry points are implemented is itself measured, by calling
every slot of the table through cffi with NULL args (an implemented one answers
INVALID_ARGUMENT, a stub UNIMPLEMENTED).  The error functions cannot be knocked out (they return
void or are the error channel itself); when jax calls them the map says whose error they read.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

#: Printed by a level's snippet once every check in it passed.
OK_MARK = "DUMPREF-LEVEL-OK"


@dataclass(frozen=True)
class Level:
    number: int
    name: str
    goal: str
    code: str


LEVELS = (
    Level(1, "device", 'jax.devices("dumpref") lists the device',
          "devs = jax.devices('dumpref')\n"
          "assert len(devs) == 1 and devs[0].platform == 'dumpref', devs\n"
          f"print({OK_MARK!r})\n"),
    Level(2, "buffers", "device_put / np.asarray round trips, then delete",
          "dev = jax.devices('dumpref')[0]\n"
          "arrays = [np.arange(12, dtype=np.float32).reshape(3, 4).T, np.array(7, np.int8),\n"
          "          np.zeros((0, 3), bool), np.arange(6).astype(jnp.bfloat16)]\n"
          "for a in arrays:\n"
          "    x = jax.device_put(a, dev)\n"
          "    assert x.devices() == {dev}, x.devices()\n"
          "    back = np.asarray(x)\n"
          "    assert back.dtype == a.dtype and back.shape == a.shape and (back == a).all(), (a, back)\n"
          "    x.delete()\n"
          "    assert x.is_deleted()\n"
          f"print({OK_MARK!r})\n"),
    Level(3, "programs", "jax.jit(f)(x) compiles and runs on the device, matching numpy",
          "dev = jax.devices('dumpref')[0]\n"
          "a = np.arange(6, dtype=np.float32).reshape(2, 3)\n"
          "y = jax.jit(lambda t: jnp.tanh(t) @ t.T + 1)(jax.device_put(a, dev))\n"
          "assert y.devices() == {dev}, y.devices()\n"
          "assert np.allclose(np.asarray(y), np.tanh(a) @ a.T + 1, rtol=1e-5), y\n"
          f"print({OK_MARK!r})\n"),
)

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


def level_passed(run) -> bool:
    return run.ok and OK_MARK in run.stdout


@dataclass
class Need:
    entry_point: str
    first_call: int   # index in the level's trace
    why: str          # how the level broke without it


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

    @property
    def needed_names(self) -> list[str]:
        return [n.entry_point for n in self.needed]


@dataclass
class PjrtMap:
    levels: list[LevelMap]
    implemented: list[str]
    runs: int = 0

    def level(self, number: int) -> LevelMap:
        return next(m for m in self.levels if m.level.number == number)

    def first_need_table(self) -> list[dict]:
        """Every needed entry point, level by level, in the order it had to be filled."""
        rows, seen = [], set()
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

    def knock(name):
        return name, plugin.run_jax(level.code, disable=[name], trace=False)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(pool.map(knock, candidates))
    needed, not_needed = [], {}
    for name in candidates:
        run = results[name]
        if level_passed(run):
            not_needed[name] = "level passed without it"
        else:
            needed.append(Need(name, calls.index(name), run.why))
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
                 sufficiency_why="" if level_passed(alone) else alone.why)
    return m, 2 + len(candidates)


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
        _CACHE[key] = PjrtMap(levels=maps, implemented=implemented, runs=runs)
    return _CACHE[key]
