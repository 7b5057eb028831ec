"""Where the TPU corpus is and how its folders are read (the fixture is conftest.py's)."""
import json
import tarfile
from pathlib import Path

ARCHIVE = Path(__file__).with_name("corpus.tar.xz")


def corpus_variants() -> list[str]:
    """Every '<program>/<variant>' folder of the corpus, read from the archive's listing."""
    with tarfile.open(ARCHIVE) as tar:
        return sorted({str(Path(m.name).parent).removeprefix("./") for m in tar.getmembers()
                       if m.name.endswith("/cost.json")})


def optimized_file(folder: Path) -> Path:
    (path,) = folder.glob("module_*.after_optimizations.txt")
    return path


def cost_of(folder: Path) -> dict:
    return json.loads((folder / "cost.json").read_text())
