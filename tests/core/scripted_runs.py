"""Claims whose measurements the test scripts: the claim reads them from a file beside it, one
run's values a call, so that a fresh-process re-run of the check (which the test cannot hand
an environment variable) sees what the test arranged."""
from __future__ import annotations

import json
from pathlib import Path

# Source of the claim file's reader: ``_measured()`` returns the next run's values (the last
# one again once they are used up).
READER = '''
def _measured():
    import json, pathlib
    here = pathlib.Path(__file__).parent
    runs = json.loads((here / "runs.json").read_text())
    n = int((here / "count").read_text()) if (here / "count").exists() else 0
    (here / "count").write_text(str(n + 1))
    return runs[min(n, len(runs) - 1)]
'''


def script(folder: Path, runs: list) -> None:
    """The values the claims of ``folder`` measure in their next runs, from the first."""
    (folder / "runs.json").write_text(json.dumps(list(runs)))
    (folder / "count").unlink(missing_ok=True)
