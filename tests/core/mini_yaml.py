"""A reader for the small part of YAML that docs/ci/dumpref.yml is written in, so that its test
needs no PyYAML (not installed with the package or its test extra, and no installed package
depends on it).

What it reads: block mappings (``key: value``, ``key:`` with an indented block), block
sequences (``- item``, ``- key: value`` opening a mapping), plain and double- or single-quoted
scalars (all kept as strings), flow sequences of plain scalars (``[push, pull_request]``),
literal block scalars (``|``) and ``#`` comments.  Anything else (anchors, aliases, tags, tabs,
folded scalars, flow mappings, several documents, a key given twice) is refused with the line,
so the workflow cannot drift into YAML this reader would misread.
"""
from __future__ import annotations

import re


class YamlError(ValueError):
    pass


_KEY = re.compile(r"^([A-Za-z_][\w.-]*):(?:\s+(.*))?$")


def _strip_comment(text: str) -> str:
    """A line's content without a trailing ``# comment`` (a # outside quotes, after a space)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _scalar(text: str, lineno: int):
    t = text.strip()
    if not t:
        return None
    if t[0] in "&*!>{%@`" or t in ("---", "..."):
        raise YamlError(f"line {lineno}: {t!r} is outside the YAML this reader knows")
    if t[0] == '"':
        if len(t) < 2 or t[-1] != '"' or '\\' in t:
            raise YamlError(f"line {lineno}: a double-quoted scalar must close on its line, "
                            f"without escapes: {t}")
        return t[1:-1]
    if t[0] == "'":
        if len(t) < 2 or t[-1] != "'":
            raise YamlError(f"line {lineno}: a single-quoted scalar must close on its line: {t}")
        return t[1:-1].replace("''", "'")
    if t[0] == "[":
        if t[-1] != "]":
            raise YamlError(f"line {lineno}: a flow sequence must close on its line: {t}")
        items = [x.strip() for x in t[1:-1].split(",")]
        if any(not re.fullmatch(r"[A-Za-z0-9_./-]+", x) for x in items):
            raise YamlError(f"line {lineno}: a flow sequence here holds plain words only: {t}")
        return items
    if re.search(r":\s|:$", t) or t.startswith("- "):
        raise YamlError(f"line {lineno}: {t!r} would be a mapping or sequence on one line")
    return t


def load(text: str):
    """The document as dicts, lists and strings (``None`` for an empty value)."""
    lines = []
    for n, raw in enumerate(text.split("\n"), 1):
        if "\t" in raw:
            raise YamlError(f"line {n}: a tab (YAML indents with spaces)")
        lines.append((n, raw))
    pos = 0

    def significant(i):
        while i < len(lines):
            n, raw = lines[i]
            content = _strip_comment(raw)
            if content.strip():
                return i
            i += 1
        return i

    def indent_of(raw):
        return len(raw) - len(raw.lstrip(" "))

    def literal(i, parent_indent):
        """A ``|`` block: the lines indented deeper than its key, indentation removed."""
        body, block_indent = [], None
        while i < len(lines):
            n, raw = lines[i]
            if raw.strip() == "":
                body.append("")
                i += 1
                continue
            ind = indent_of(raw)
            if ind <= parent_indent:
                break
            if block_indent is None:
                block_indent = ind
            if ind < block_indent:
                raise YamlError(f"line {n}: less indented than the block it continues")
            body.append(raw[block_indent:])
            i += 1
        while body and body[-1] == "":
            body.pop()
        return "\n".join(body) + "\n", i

    def value_after(rest, n, i, indent):
        """The value of ``key: rest`` (or ``- rest``) at ``indent``; ``i`` is the next line."""
        if rest is None or rest == "":
            j = significant(i)
            if j < len(lines) and indent_of(lines[j][1]) > indent:
                return block(j, indent_of(lines[j][1]))
            if j < len(lines) and indent_of(lines[j][1]) == indent and \
                    lines[j][1].lstrip().startswith("- "):
                return block(j, indent)   # a sequence may sit at its key's indentation
            return None, i
        if rest == "|":
            return literal(i, indent)
        if rest.startswith(("|", ">")):
            raise YamlError(f"line {n}: only a plain literal block (|) is read, not {rest!r}")
        return _scalar(rest, n), i

    def block(i, indent):
        n, raw = lines[i]
        if raw[indent:].startswith("- ") or raw[indent:].rstrip() == "-":
            return sequence(i, indent)
        return mapping(i, indent)

    def mapping(i, indent, first=None):
        out: dict = {}
        if first is not None:
            key, rest, n, i = first
            out[key], i = value_after(rest, n, i, indent)
        while True:
            i = significant(i)
            if i >= len(lines):
                return out, i
            n, raw = lines[i]
            ind = indent_of(raw)
            if ind < indent:
                return out, i
            if ind > indent:
                raise YamlError(f"line {n}: indented more than the mapping it is in")
            content = _strip_comment(raw)[indent:]
            if content.startswith("- "):
                return out, i
            m = _KEY.match(content)
            if not m:
                raise YamlError(f"line {n}: not a 'key: value' line: {content!r}")
            key = m.group(1)
            if key in out:
                raise YamlError(f"line {n}: key {key!r} given twice")
            out[key], i = value_after(m.group(2), n, i + 1, indent)

    def sequence(i, indent):
        out: list = []
        while True:
            i = significant(i)
            if i >= len(lines):
                return out, i
            n, raw = lines[i]
            ind = indent_of(raw)
            content = _strip_comment(raw)[indent:]
            if ind != indent or not (content.startswith("- ") or content == "-"):
                if ind > indent:
                    raise YamlError(f"line {n}: indented more than the sequence it is in")
                return out, i
            rest = content[2:].strip()
            m = _KEY.match(rest)
            if m:   # "- key: value" opens a mapping indented at the key
                value, i = mapping(i + 1, indent + 2, first=(m.group(1), m.group(2), n, i + 1))
            else:
                value, i = value_after(rest, n, i + 1, indent)
            out.append(value)

    pos = significant(0)
    if pos >= len(lines):
        return None
    if indent_of(lines[pos][1]) != 0:
        raise YamlError(f"line {lines[pos][0]}: the document must start at column 0")
    doc, end = block(pos, 0)
    end = significant(end)
    if end < len(lines):
        raise YamlError(f"line {lines[end][0]}: unexpected {lines[end][1].strip()!r}")
    return doc
