"""The one place that touches private jaxlib APIs: XLA's own HLO parser and cost analysis.

Both are reached through names that jax does not promise to keep
(``jaxlib._hlo.hlo_module_from_text``, ``jax._src.lib._jax.hlo_module_cost_analysis``,
``jax._src.xla_bridge.get_backend``, ``jax._src.source_info_util._exclude_paths``).  If a jaxlib upgrade moves them, only this file changes,
and the error says which name went missing instead of failing deep inside an analysis.
"""
from __future__ import annotations

import contextlib
import functools


class XlaPrivateApiError(RuntimeError):
    """A private jaxlib entry point this module relies on is gone or changed."""


def _hlo_module_from_text():
    try:
        # jax first: importing it sets up jaxlib's C++ logging; jaxlib._hlo imported on its own
        # leaves XLA's INFO lines on, and every later backend start-up prints them.
        import jax  # noqa: F401
    except ImportError as e:
        raise XlaPrivateApiError(f"jax cannot be imported: {e}") from e
    try:
        from jaxlib import _hlo  # jaxlib 0.10
        return _hlo.hlo_module_from_text
    except (ImportError, AttributeError):
        pass
    try:
        from jax._src.lib import _jax  # jaxlib 0.9 keeps the parser in _jax
        return _jax.hlo_module_from_text
    except (ImportError, AttributeError) as e:
        raise XlaPrivateApiError("neither jaxlib._hlo.hlo_module_from_text (jaxlib 0.10) nor "
                                 f"jax._src.lib._jax.hlo_module_from_text (jaxlib 0.9) is "
                                 f"available: {e}") from e


def _cost_analysis_fn():
    try:
        from jax._src.lib import _jax
        return _jax.hlo_module_cost_analysis
    except (ImportError, AttributeError) as e:
        raise XlaPrivateApiError(
            f"jax._src.lib._jax.hlo_module_cost_analysis is unavailable: {e}") from e


@functools.lru_cache(maxsize=1)
def _cpu_client():
    # Always the CPU client: another plugin (this project's own PJRT device) may be the default
    # backend, and HloCostAnalysis with the CPU client's shape-size function is what
    # Compiled.cost_analysis() reports on CPU.
    from jax._src import xla_bridge
    return xla_bridge.get_backend("cpu")


def parse_with_xla(text: str, *, source: str | None = None):
    """XLA's C++ parser: a ``jaxlib._hlo.HloModule``.  Bad text raises ValueError naming source."""
    parse = _hlo_module_from_text()
    try:
        return parse(text)
    except Exception as e:  # jaxlib raises JaxRuntimeError (INVALID_ARGUMENT) on bad text
        first = str(e).strip().splitlines()
        raise ValueError(f"{source or '<hlo text>'}: XLA's parser rejected the text: "
                         f"{' '.join(first[:2])}") from None


def cost_analysis(text_or_module, *, source: str | None = None) -> dict:
    """XLA's HloCostAnalysis of a module (text or an already parsed jaxlib module).

    Keys as XLA names them: ``flops``, ``transcendentals``, ``bytes accessed`` (sum over the
    entry computation of operand plus output bytes), ``bytes accessed{i}{}`` per operand
    index, ``bytes accessedout{}``, ``utilization{i}{}``...  Values are floats.
    """
    module = (parse_with_xla(text_or_module, source=source)
              if isinstance(text_or_module, str) else text_or_module)
    return dict(_cost_analysis_fn()(_cpu_client(), module))


@contextlib.contextmanager
def frames_left_out_of_source_locations(files):
    """While active, jax leaves the frames of these Python files out of the source locations
    it writes into the programs it lowers, as it leaves out its own frames (through
    ``jax._src.source_info_util``'s exclusion list, a private name).  Yields whether it could:
    False (and nothing changes) when that name is gone from the jax installed."""
    try:
        from jax._src import source_info_util as siu
        paths = siu._exclude_paths
        clear = (siu._exclude_path_regex.cache_clear, siu.is_user_filename.cache_clear)
    except (ImportError, AttributeError):
        yield False
        return
    added = [f for f in dict.fromkeys(files) if f and f not in paths]
    paths.extend(added)
    for c in clear:
        c()
    try:
        yield True
    finally:
        for f in added:
            try:
                paths.remove(f)
            except ValueError:
                pass
        for c in clear:
            c()
