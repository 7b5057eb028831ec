"""The TPU corpus (corpus.tar.xz: dumps, cost analyses and device times recorded on a TPU v5e by
record_tpu_corpus.py, the files the tests read), unpacked once per session.  Tests that need the
chip itself are marked ``tpu`` (tests/conftest.py skips them elsewhere)."""
import tarfile
from pathlib import Path

import pytest
from tpu_corpus import ARCHIVE


@pytest.fixture(scope="session")
def tpu_corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tpu-corpus")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    return root
