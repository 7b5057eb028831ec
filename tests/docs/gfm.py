"""Markdown as GitHub shows it: cmark-gfm (GitHub's own library, through cmarkgfm) plus the two
things GitHub's page pipeline adds after it, heading ids and the links that use them.

Used by the tests of ``writeup.md`` and ``README.md`` (what a reader meets when the file is opened
on GitHub), by the README tests (the fenced blocks, with the line each starts on), and by hand:

    python tests/docs/gfm.py writeup.md /tmp/writeup.html     # a page to open in a browser

cmark-gfm gives each block its source line (``data-sourcepos``) but neither ids nor a place for
raw HTML blocks, so the checks below read the rendered HTML with ``html.parser`` and go back to
the source only for what the HTML no longer shows (a table row's cell count: GitHub pads a short
row and drops the cells of a long one without a word).
"""
from __future__ import annotations

import html
import itertools
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import cmarkgfm
from cmarkgfm.cmark import Options

OPTIONS = Options.CMARK_OPT_SOURCEPOS | Options.CMARK_OPT_UNSAFE


def render(text: str) -> str:
    """The HTML body cmark-gfm makes of ``text``, with GitHub's extensions (tables, autolinks,
    strikethrough, task lists, tag filter).  Raw HTML is kept, as GitHub keeps ``<details>`` and
    ``<a id>``."""
    return cmarkgfm.github_flavored_markdown_to_html(text, options=OPTIONS)


def slug(text: str) -> str:
    """GitHub's heading id: the heading's text, lower-cased, every character that is not a
    letter, digit, ``_``, ``-`` or space removed, each space made ``-`` (no collapsing)."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@dataclass
class Block:
    """A fenced code block: its info string's first word, its text, the line its fence opens on
    and the heading it sits under."""
    lang: str
    text: str
    line: int
    heading: str


@dataclass
class Page:
    """What the rendered page holds, as a reader (and a link) meets it."""
    headings: list = field(default_factory=list)      # (level, text, id, line)
    anchors: set = field(default_factory=set)         # explicit <a id> / <a name>
    links: list = field(default_factory=list)         # (href, line of the enclosing block)
    images: list = field(default_factory=list)        # (src, line)
    blocks: list = field(default_factory=list)        # Block
    tables: list = field(default_factory=list)        # (first line, last line)
    details: list = field(default_factory=list)       # problems with <details>/<summary>
    raw_markdown: list = field(default_factory=list)  # (line of block or None, text) left unrendered
    stray_emphasis: list = field(default_factory=list)  # (line, text): * or _ read as emphasis

    @property
    def ids(self) -> set:
        return {h[2] for h in self.headings} | self.anchors


# Markdown that, found in the page's text, was not rendered: a table row, a code fence, an ATX
# heading.  They turn up as text when a <details> HTML block swallows the lines under it (no blank
# line after </summary>) or a table's delimiter row is broken.
# A row ends with its pipe: a rendered cell whose text merely starts and contains one
# ("|A/A difference| / predicted", a number's name) is not a row.
_UNRENDERED = re.compile(r"^\s*(\|.*\|\s*$|```|#{1,6} )")


class _Reader(HTMLParser):
    """Reads cmark-gfm's HTML.  Elements Markdown made carry their source line; raw HTML (a
    <details> block) is copied through without one, so its tags are found in the source by
    searching forward from the last line known."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self._source = source
        self._starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self._cursor = 0
        self.page = Page()
        self._ids: dict[str, int] = {}
        self._line = None            # source line of the innermost element that carries one
        self._lines: list = []
        self._heading = None         # [level, text, line] while inside <hN>
        self._pre = 0
        self._code = 0
        self._pre_lang = ""
        self._pre_text: list = []
        self._pre_line = 0
        self._last_heading = ""
        self._details: list = []     # stack of [line, saw_summary]
        self._last_char = ""         # the last character of text seen (outside code)
        self._emph = None            # [tag, text, line, char before] while inside <em>/<strong>
        self._after_emph = None      # (tag, text, line) of an emphasis just closed

    # -- element structure -------------------------------------------------------------
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-sourcepos" in a:
            line = int(a["data-sourcepos"].split(":", 1)[0])
            self._cursor = max(self._cursor, self._starts[min(line, len(self._starts)) - 1])
        else:
            line = self._raw_line(self.get_starttag_text() or f"<{tag}") or self._line
        if tag not in _VOID:
            self._lines.append(self._line)
        self._line = line
        if tag == "a":
            for key in ("id", "name"):
                if a.get(key):
                    self.page.anchors.add(a[key])
            if a.get("href"):
                self.page.links.append((a["href"], line))
        elif tag == "img" and a.get("src"):
            self.page.images.append((a["src"], line))
        elif re.fullmatch(r"h[1-6]", tag):
            self._heading = [int(tag[1]), "", line]
        elif tag == "pre":
            self._pre += 1
            self._pre_lang, self._pre_text, self._pre_line = a.get("lang", ""), [], line
        elif tag == "code":
            self._code += 1
        elif tag in ("em", "strong") and not self._pre:
            self._emph = [tag, "", line, self._last_char]
        elif tag == "table" and "data-sourcepos" in a:
            (start, _), (end, _) = (p.split(":") for p in a["data-sourcepos"].split("-"))
            self.page.tables.append((int(start), int(end)))
        elif tag == "details":
            self._details.append([line, False])
        elif tag == "summary":
            if not self._details:
                self.page.details.append(f"line {line}: <summary> outside any <details>")
            elif self._details[-1][1]:
                self.page.details.append(f"line {line}: a second <summary> in one <details>")
            else:
                self._details[-1][1] = True

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def _raw_line(self, text: str):
        """The source line of raw HTML ``text``: its next occurrence after the cursor."""
        at = self._source.find(text, self._cursor)
        if at < 0:
            return None
        self._cursor = at + len(text)
        return self._source.count("\n", 0, at) + 1

    def handle_endtag(self, tag):
        end_line = self._raw_line(f"</{tag}>") if tag in ("details", "summary") else None
        if re.fullmatch(r"h[1-6]", tag) and self._heading:
            level, text, line = self._heading
            base = slug(text)
            n = self._ids.get(base, 0)
            self._ids[base] = n + 1
            hid = base if n == 0 else f"{base}-{n}"
            self.page.headings.append((level, text, hid, line))
            self._last_heading = text
            self._heading = None
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self.page.blocks.append(Block(self._pre_lang, "".join(self._pre_text),
                                          self._pre_line or 0, self._last_heading))
        elif tag == "code" and self._code:
            self._code -= 1
        elif tag in ("em", "strong") and self._emph:
            kind, text, line, before = self._emph
            self._emph = None
            # Emphasis a writer meant stands between spaces or punctuation and holds words; one
            # opened inside a number (2*4*128) or a file pattern (*.txt ... (*.) is an asterisk
            # GitHub ate.
            if before.isalnum() or text[:1] in ".,;:)" or text[-1:] in "([":
                self.page.stray_emphasis.append((line, text))
            else:
                self._after_emph = (kind, text, line)
        elif tag == "details":
            if not self._details:
                self.page.details.append(f"line {end_line}: </details> without <details>")
            else:
                opened, summary = self._details.pop()
                if not summary:
                    self.page.details.append(f"line {opened}: <details> without <summary>")
        if tag not in _VOID and self._lines:
            self._line = self._lines.pop()

    def handle_data(self, data):
        if self._heading is not None:
            self._heading[1] += data
        if self._pre:
            self._pre_text.append(data)
            return
        if self._code:
            return
        if self._emph is not None:
            self._emph[1] += data
        if self._after_emph and data:
            if data[0].isalnum():
                self.page.stray_emphasis.append(self._after_emph[::2])
            self._after_emph = None
        if data:
            self._last_char = data[-1]
        for text in data.splitlines():
            if _UNRENDERED.match(text):
                line = self._raw_line(text.strip()) or self._line
                self.page.raw_markdown.append((line, text.strip()))

    def close(self):
        super().close()
        for opened, summary in self._details:
            if not summary:
                self.page.details.append(f"line {opened}: <details> without <summary>")
            self.page.details.append(f"line {opened}: <details> never closed")


_VOID = {"img", "br", "hr", "input", "meta", "link", "area", "base", "col", "embed", "source",
         "track", "wbr"}


def read_page(path: Path) -> tuple[str, str, Page]:
    """(source, html, page) of the Markdown file ``path``."""
    source = path.read_text(encoding="utf-8")
    body = render(source)
    reader = _Reader(source)
    reader.feed(body)
    reader.close()
    return source, body, reader.page


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, as GitHub parses them."""
    return read_page(path)[2].blocks


# ---- the checks; each returns a list of problems, one sentence each, naming the line ----------

def split_row(line: str) -> list[str]:
    """The cells of a GFM table row: split at each ``|`` not escaped with a backslash (also
    inside code spans, as GFM does), the outer pipes removed."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return re.split(r"(?<!\\)\|", s)


def table_problems(source: str, page: Page, name: str) -> list[str]:
    lines = source.splitlines()
    out = []
    for start, end in page.tables:
        header = len(split_row(lines[start - 1]))
        for n in range(start + 1, end + 1):
            cells = len(split_row(lines[n - 1]))
            if cells != header:
                out.append(f"{name}:{n}: table row has {cells} cells, its header ({name}:{start}) "
                           f"has {header}: {lines[n - 1][:100]}")
    for line, text in page.raw_markdown:
        where = f"{name}:{line}" if line else f"{name} (inside raw HTML)"
        out.append(f"{where}: Markdown shown as text, not rendered: {text[:100]}")
    return out


def emphasis_problems(page: Page, name: str) -> list[str]:
    return [f"{name}:{line}: '*' or '_' read as emphasis around {text[:60]!r} "
            f"(escape it as \\* or put the text in a code span)"
            for line, text in page.stray_emphasis]


def anchor_problems(page: Page, name: str) -> list[str]:
    ids = page.ids
    return [f"{name}:{line}: link {href} goes to no heading or anchor of the page"
            for href, line in page.links
            if href.startswith("#") and unquote(href[1:]) not in ids]


def contents_problems(page: Page, name: str) -> list[str]:
    """An explicit anchor (a claim's ``<a id>``) that no link of the page leads to: the contents
    list misses it."""
    linked = {unquote(h[1:]) for h, _ in page.links if h.startswith("#")}
    return [f"{name}: anchor #{a} is linked from nowhere on the page (not in the contents list)"
            for a in sorted(page.anchors - linked)]


def path_problems(page: Page, folder: Path, name: str) -> list[str]:
    out = []
    for what, refs in (("link", page.links), ("image", page.images)):
        for ref, line in refs:
            if ref.startswith("#") or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", ref):
                continue
            target = unquote(ref.split("#", 1)[0].split("?", 1)[0])
            if target and not (folder / target).exists():
                out.append(f"{name}:{line}: {what} {ref} points at a file that does not exist")
    return out


def details_problems(page: Page, name: str) -> list[str]:
    return [f"{name}: {p}" for p in page.details]


def problems(path: Path) -> dict[str, list[str]]:
    """Each check's problems with the page at ``path``, by check."""
    source, _, page = read_page(path)
    name = path.name
    return {"tables": table_problems(source, page, name),
            "emphasis": emphasis_problems(page, name),
            "anchors": anchor_problems(page, name),
            "contents": contents_problems(page, name),
            "paths": path_problems(page, path.parent, name),
            "details": details_problems(page, name)}


def all_problems(path: Path) -> list[str]:
    return [p for found in problems(path).values() for p in found]


# ---- a page to look at ------------------------------------------------------------------------

# A stylesheet after GitHub's (its font stack, a 980 px box whose text column is 890 px inside its
# 1 px border and 45 px padding, table and code look), written here.
STYLE = """
body { margin: 0; background: #fff; color: #1f2328;
  font: 16px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial,
  sans-serif; }
main { max-width: 982px; margin: 0 auto; padding: 32px 45px; box-sizing: border-box;
  border: 1px solid #d1d9e0; border-radius: 6px; margin-top: 16px; }
h1, h2 { border-bottom: 1px solid #d1d9e0b3; padding-bottom: .3em; }
h1 { font-size: 2em; } h2 { font-size: 1.5em; } h3 { font-size: 1.25em; }
h1, h2, h3, h4 { margin: 24px 0 16px; font-weight: 600; line-height: 1.25; }
p, ul, ol, table, pre, details { margin: 0 0 16px; }
a { color: #0969da; text-decoration: none; }
code { font: 85% ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono",
  monospace; background: #818b981f; border-radius: 6px; padding: .2em .4em; }
pre { background: #f6f8fa; border-radius: 6px; padding: 16px; overflow: auto; line-height: 1.45; }
pre code { background: none; padding: 0; font-size: 85%; }
table { border-collapse: collapse; display: block; width: max-content; max-width: 100%;
  overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
th { font-weight: 600; } tr:nth-child(2n) { background: #f6f8fa; }
img { max-width: 100%; }
summary { cursor: pointer; }
"""


def page_html(path: Path, *, open_details: bool = False) -> str:
    """A standalone HTML page of ``path`` as GitHub shows it: heading ids added, relative image
    paths made absolute (so the page can be opened from anywhere)."""
    _, body, page = read_page(path)
    ids = iter(page.headings)

    def add_id(m):
        _, _, hid, _ = next(ids)
        return f'<{m.group(1)} id="{html.escape(hid)}"'

    body = re.sub(r"<(h[1-6])(?=[\s>])", add_id, body)
    base = path.parent.resolve().as_uri() + "/"
    body = re.sub(r'(<img[^>]*\ssrc=")(?![a-z]+:)', lambda m: m.group(1) + base, body)
    if open_details:
        body = body.replace("<details>", "<details open>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(path.name)}"
            f"</title><style>{STYLE}</style></head><body><main>{body}</main></body></html>")


if __name__ == "__main__":
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.write_text(page_html(src, open_details="--open" in sys.argv[3:]), encoding="utf-8")
    print(dst)


# ---- the page as a browser lays it out -------------------------------------------------------

# Chromium (headless) lays the page out at a 1280 px window: STYLE's 980 px column less its
# padding leaves GitHub's 890 px of text.  It reports the page's height, each heading's place,
# and every element outside a code block that reaches past the column (a table or a line too
# wide, which GitHub shows with a scroll bar or lets run out).
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW = (1280, 1000)
_MEASURE = """<script>window.addEventListener('load', () => {
  const main = document.querySelector('main'), cs = getComputedStyle(main);
  const left = main.getBoundingClientRect().left + parseFloat(cs.paddingLeft);
  const right = main.getBoundingClientRect().left + main.clientWidth - parseFloat(cs.paddingRight);
  // inside a closed <details> (its own <summary> aside) an element is not shown
  const folded = e => { for (let d = e.closest('details'); d; d = d.parentElement.closest('details'))
    if (!d.open && !(d.querySelector(':scope > summary') || {contains: () => false}).contains(e)) return true;
    return false; };
  const wide = [];
  for (const e of main.querySelectorAll('p, li, table, h1, h2, h3, h4, summary, img')) {
    if (e.closest('pre') || folded(e)) continue;
    const width = Math.max(e.scrollWidth, e.getBoundingClientRect().width);
    if (e.getBoundingClientRect().left + width > right + 1)
      wide.push([e.tagName.toLowerCase(), e.getAttribute('data-sourcepos') || '', Math.round(width)]);
  }
  const beside = [];
  for (const img of main.querySelectorAll('img')) {
    const p = img.closest('p');
    if (p && p.textContent.trim() && [...p.childNodes].some(n => n !== img && n.textContent.trim()
        && n.getBoundingClientRect && n.getBoundingClientRect().top < img.getBoundingClientRect().bottom - 1))
      beside.push(p.getAttribute('data-sourcepos') || '');
  }
  const out = document.createElement('pre');
  out.id = 'dumpref-measure';
  out.textContent = JSON.stringify({height: Math.round(main.getBoundingClientRect().bottom + scrollY),
    column: Math.round(right - left), wide, beside,
    headings: [...main.querySelectorAll('h1, h2, h3')].map(h => [h.id, Math.round(h.getBoundingClientRect().top + scrollY)])});
  document.body.appendChild(out);
});</script>"""


def browser() -> str | None:
    """The headless browser the layout checks use, or None when none is installed."""
    import shutil
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


@dataclass
class Layout:
    """The page as Chromium lays it out, every <details> closed (as a reader first meets it)."""
    height: int                     # px, the page's top to the bottom of its text box
    column: int                     # px, the text column
    wide: list                      # (tag, source line, width px): outside code blocks, past the column
    beside: list                    # source lines of paragraphs where text sits beside a figure
    headings: list                  # (id, top px)

    def section_heights(self) -> list:
        """(heading id, px from it to the next heading or the end)."""
        tops = self.headings + [("(end)", self.height)]
        return [(a, t2 - t1) for (a, t1), (_, t2) in itertools.pairwise(tops)]


def layout(path: Path, *, timeout: float = 300) -> Layout:
    """Lay ``path`` out in headless Chromium (``browser()``) and read the measurements back from
    the page (--dump-dom prints the DOM after the load event, where the script wrote them)."""
    import json
    import subprocess
    import tempfile
    exe = browser()
    if exe is None:
        raise RuntimeError(f"no headless browser ({', '.join(BROWSERS)}) on PATH")
    page = page_html(path).replace("</body>", _MEASURE + "</body>")
    with tempfile.TemporaryDirectory(prefix="dumpref-layout-") as tmp:
        html_path = Path(tmp) / "page.html"
        html_path.write_text(page, encoding="utf-8")
        done = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=20000",
                               f"--user-data-dir={tmp}/profile", "--dump-dom", html_path.as_uri()],
                              capture_output=True, text=True, timeout=timeout, check=False)
    m = re.search(r'id="dumpref-measure">([^<]*)<', done.stdout)
    if not m:
        raise RuntimeError(f"{exe} laid out {path} but wrote no measurement (exit {done.returncode}): "
                           f"{done.stderr[-800:]}")
    d = json.loads(html.unescape(m.group(1)))
    return Layout(d["height"], d["column"], [tuple(w) for w in d["wide"]], d["beside"],
                  [tuple(h) for h in d["headings"]])
