"""A write-up's two files as the tests edit them: the Markdown and its data file beside it."""
from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

from pytest_dumpref import writeup

LINE = re.compile(r"<!-- dumpref-data (\S+) sha256=([0-9a-f]{64}) -->")


def data_path(md: Path) -> Path:
    return md.with_name(LINE.search(md.read_text()).group(1))


def data(md: Path) -> dict:
    return json.loads(data_path(md).read_text())


def edit_data(md: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the data file, and the sha256 the Markdown names it by, as a
    hand that edits both files consistently would: only the lines rendered from it can tell."""
    path = data_path(md)
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    path.write_text(text.replace(old, new))
    digest = writeup.data_digest(json.loads(path.read_text()))
    md.write_text(LINE.sub(lambda m: f"<!-- dumpref-data {m.group(1)} sha256={digest} -->", md.read_text()))


def embed(md: Path, compress: bool = False) -> None:
    """Turn the pair into one file as pytest-dumpref wrote it up to format 2: the data in the
    Markdown's last comment (each claim zlib-compressed above 64 KiB), no data file."""
    path = data_path(md)
    d = json.loads(path.read_text())

    def dump(x):
        return json.dumps(x, sort_keys=True, ensure_ascii=False).replace("--", "-\\u002d")

    def pack(rec):
        raw = json.dumps(rec, sort_keys=True, ensure_ascii=False).encode()
        return "zlib:" + base64.b64encode(zlib.compress(raw, 9)).decode()
    body = ",\n".join(f"{dump(k)}: {dump(pack(v) if compress else v)}" for k, v in d["claims"].items())
    block = f'{{"format": 2, "environment": {dump(d["environment"])},\n"claims": {{\n{body}\n}}}}'
    text = md.read_text()
    md.write_text(text[:text.rindex("<!-- dumpref-data")] + f"<!-- dumpref-data\n{block}\n-->\n")
    path.unlink()
