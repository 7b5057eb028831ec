"""How the renderer lays evidence out for a person reading through: what stays in view, what
folds, and how numbers read.  Records go straight to writeup.render (no pytest run), so each
rule is shown on the smallest record that exercises it."""
from __future__ import annotations

import re

from pytest_dumpref import jax_fixtures
from pytest_dumpref.config import DumprefConfig
from pytest_dumpref.provenance import CORE_FIELDS
from pytest_dumpref.writeup import format_number, readable_body, render

ENV = {"chip": "AMD EPYC", "platform": "cpu", "jax": "0.10.2", "jaxlib": "0.10.2"}


def _record(evidence: list[dict], name: str = "test_one") -> dict:
    return {"nodeid": f"claims/test_x.py::{name}", "text": "A claim.", "title": "One",
            "section": "general", "outcome": "passed", "order": 0,
            "provenance": {"dtype": "f32", "shapes": {"x": [1]}, "method": "counting"},
            "evidence": evidence, "observed": {}, "environment": ENV}


def _render(evidence: list[dict], **config) -> str:
    # the environment's rows as the plugin gives them with its jax extension registered
    config.setdefault("environment_fields", CORE_FIELDS + jax_fixtures.FIELDS)
    return render([_record(evidence)], ENV, DumprefConfig(**config)).split("<!-- dumpref-data")[0]


def _claim(text: str) -> str:
    """The claim's part of the page, without its closing fold's own <details> line."""
    part = text[text.index("### One"):text.index("## Not established")]
    return re.sub(r"<details><summary>[^\n]*how to reproduce this claim</summary>\n", "", part)


def _excerpt(title: str, n: int) -> dict:
    return {"kind": "excerpt", "title": title, "lang": "hlo",
            "text": "\n".join(f"%add.{i} = f32[4] add(%p, %q)" for i in range(n))}


def test_measured_values_read_without_exponents_from_a_thousand_up():
    assert format_number(53153.2, None) == "53,153"
    assert format_number(16390.0, "us") == "16,390 us"
    assert format_number(2.4351, None) == "2.435"
    assert format_number(0.33649, None) == "0.3365"
    assert format_number(4.353e-07, None) == "4.353e-07"   # a row of zeros would read worse
    text = _render([{"kind": "table", "title": "times", "header": ["variant", "us/call"],
                     "rows": [["softmax", 53153.2], ["dispatch", 16.71]], "tolerances": {}}])
    assert "| softmax | 53,153 |" in text and "| dispatch | 16.71 |" in text and "e+0" not in text


def test_a_before_after_pair_folds_as_one_block_when_either_side_is_long():
    text = _claim(_render([_excerpt("before cse (file.0023.txt)", 13), _excerpt("after cse (file.0024.txt)", 1)]))
    assert text.count("<details>") == 1
    assert "<details><summary>before and after cse (13 + 1 lines)</summary>" in text
    block = text[text.index("<details>"):text.index("</details>")]
    assert "**before cse (file.0023.txt)**" in block and "**after cse (file.0024.txt)**" in block


def test_a_short_pair_stays_in_view_and_unrelated_excerpts_fold_alone():
    text = _claim(_render([_excerpt("before cse (a.txt)", 2), _excerpt("after cse (b.txt)", 2)]))
    assert "<details>" not in text and "**before cse (a.txt)**" in text and "**after cse (b.txt)**" in text
    text = _claim(_render([_excerpt("before cse (a.txt)", 13), _excerpt("after algsimp (b.txt)", 13)]))
    assert text.count("<details>") == 2 and "before and after" not in text


def _file(i: int) -> dict:
    return {"kind": "file", "title": f"XLA dump {i}", "sha256": f"{i:064x}", "where": f"d{i}/m.txt"}


def test_a_long_list_of_evidence_files_folds_under_the_reproduce_line():
    text = _render([{"kind": "number", "name": "n", "value": 1}] + [_file(i) for i in range(30)])
    assert "leaves the evidence kept by hash, 30 files and folders, listed below." in text
    assert "<details><summary>the 30 files and folders of evidence, with their sha256</summary>" in text
    assert all(f"**XLA dump {i}**" in text[text.index("<details><summary>the 30"):] for i in range(30))
    short = _claim(_render([{"kind": "number", "name": "n", "value": 1}, _file(1), _file(2)]))
    assert "<details>" not in short and "- file **XLA dump 2**" in short


def test_a_claims_folds_and_reproduce_lines_gather_at_its_end_under_one_line():
    """What stays in view is the sentence, the numbers in view, notes and figures; the folded
    tables and excerpts and the Reproduce lines follow under one <details>, in their order, and
    the one line says what it holds."""
    table = {"kind": "table", "title": "kernels", "header": ["k"], "rows": [[i] for i in range(30)],
             "tolerances": {}}
    text = _render([{"kind": "number", "name": "n", "value": 1}, table,
                    {"kind": "note", "text": "A short note."}, _excerpt("after cse (b.txt)", 13), _file(1)])
    claim = text[text.index("### One"):text.index("## Not established")]
    fold = "<details><summary>1 table; 1 excerpt; how to reproduce this claim</summary>"
    assert claim.count(fold) == 1
    assert claim.index("| n | 1 | exact |") < claim.index("A short note.") < claim.index(fold) \
        < claim.index("<details><summary>kernels (30 rows)</summary>") \
        < claim.index("<details><summary>after cse (b.txt) (13 lines)</summary>") \
        < claim.index("Reproduce: `") < claim.index("file **XLA dump 1**") < claim.rindex("</details>")
    # nested <details> balance, each with blank lines around its Markdown (GitHub renders them)
    assert claim.count("<details>") == claim.count("</details>") == 3
    bare = _render([{"kind": "number", "name": "n", "value": 1}])
    assert "<details><summary>how to reproduce this claim</summary>\n\nReproduce: `" in bare


def test_a_long_note_folds_in_its_place_behind_its_first_sentence():
    long = ("The first sentence says what the note is about. " + "Then it goes on " * 30).strip()
    text = _render([{"kind": "note", "text": "Before."}, {"kind": "note", "text": long},
                    {"kind": "note", "text": "After."}])
    claim = text[text.index("### One"):]
    summary = "<details><summary>The first sentence says what the note is about.</summary>\n\nThen it goes on"
    assert claim.index("Before.") < claim.index(summary) < claim.index("After.") \
        < claim.index("how to reproduce this claim")
    # a first sentence too long for the summary's line: its opening words, and the note whole
    run_on = "word " * 100
    text = _render([{"kind": "note", "text": run_on}])
    assert "<details><summary>word word" in text and " …</summary>\n\n" + run_on.strip() in text


def test_the_environment_table_has_a_header_and_the_setup_says_to_activate_it():
    text = _render([{"kind": "number", "name": "n", "value": 1}],
                   setup="python3 -m venv .venv && . .venv/bin/activate && pip install -e .")
    assert "<details><summary>the environment of the run that wrote this file: chip, platform and" in text
    assert "| environment | of the run that wrote this file |\n|---|---|\n| chip |" in text
    assert "|  |  |" not in text and "| XLA_FLAGS | (not set) |" in text
    assert "in a new shell, activate it again first (`. .venv/bin/activate`)" in text


def test_the_readable_body_leaves_out_folded_blocks_and_the_data_block():
    text = ("# T\n\nsentence\n\n<details><summary>s</summary>\n\n| a |\n|---|\n| 1 |\n\n</details>\n\n"
            "after\n<!-- dumpref-data\n{}\n-->\n")
    assert readable_body(text) == ["# T", "", "sentence", "", "", "after"]
    nested = "a\n<details><summary>x</summary>\n<details><summary>y</summary>\nin\n</details>\nstill in\n</details>\nb\n"
    assert readable_body(nested) == ["a", "b", ""]
