# jax is imported here, in the outer process, on purpose: pytester's in-process runs drop
# every module first imported inside them, and jaxlib's extension aborts when imported twice.
import jax
import pytest

pytest_plugins = ["pytester"]


def on_tpu() -> bool:
    """Whether jax's default backend here is a TPU (the chip the ``tpu`` marker asks for)."""
    try:
        return jax.default_backend() == "tpu"
    except RuntimeError:
        return False


def pytest_configure(config):
    config.addinivalue_line("markers", "tpu: needs a TPU as jax's default backend; skipped elsewhere "
                                       "(the TPU paths that need no chip run on tests/xla_tpu's corpus)")


def pytest_collection_modifyitems(config, items):
    marked = [i for i in items if i.get_closest_marker("tpu")]
    if marked and not on_tpu():
        skip = pytest.mark.skip(reason="needs a TPU (jax's default backend is not one here)")
        for item in marked:
            item.add_marker(skip)
