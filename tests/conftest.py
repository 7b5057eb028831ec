# jax is imported here, in the outer process, on purpose: pytester's in-process runs drop
# every module first imported inside them, and jaxlib's extension aborts when imported twice.
import jax  # noqa: F401

pytest_plugins = ["pytester"]
