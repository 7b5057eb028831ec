"""The one thing pyproject.toml cannot say: ship ``plugin_c/`` inside the package.

The PJRT plugin's C sources live at the repository root (``plugin_c/``), outside the Python
package, yet a non-editable install must carry them: the ``jax_plugins`` entry point builds the
library from them on first use.  pyproject's ``packages.find`` cannot add a package whose folder
lies elsewhere, so the package list is computed here: every ``pytest_dumpref*`` package found on
disk, plus ``plugin_c/`` installed as data under ``pytest_dumpref/pjrt/plugin_c``
(``pytest_dumpref.pjrt.build.plugin_source_dir`` looks there after the checkout).
"""
from setuptools import find_packages, setup

PLUGIN_SOURCES = "pytest_dumpref.pjrt.plugin_c"

setup(
    packages=find_packages(include=["pytest_dumpref", "pytest_dumpref.*"]) + [PLUGIN_SOURCES],
    package_dir={PLUGIN_SOURCES: "plugin_c"},
    package_data={PLUGIN_SOURCES: ["*.c", "*.h", "minimal/*.c"]},
)
