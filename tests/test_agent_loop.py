"""Agent-loop windows (issue 22): the rules of ctxdb.agent.loop on hand-made histories,
and ctxdb.agent.adapter recording them as decisions."""

from __future__ import annotations

import copy
import dataclasses
import gc
import itertools
import json
import random
import re
import shlex
import weakref

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select

from ctxdb import ContextStore, forensics, models
from ctxdb.agent.adapter import (
    LADDER_FOLDED_BEFORE,
    LADDER_LARGEST_FIRST,
    SentMessagesError,
    StepTakenError,
    TreeFiles,
    construct_step,
    plan_window,
    prompt_names,
    run_ref,
    step_json,
    window_fits,
)
from ctxdb.agent.arms import PromptCounter
from ctxdb.agent.loop import (
    AGENT_TURN,
    DELETED,
    EARLY_LISTING_SHARE_MAX,
    ELIDED_LINES,
    FILE_IN_PLAY_STEPS,
    FILE_VIEW,
    GONE,
    LISTING_ENTRIES_MAX,
    MASK_HINT,
    OUT_OF_PLAY_RULE,
    OUTPUT_PART,
    POINTER,
    POINTER_NAMES_MAX,
    RAISED_SHOWN_MAX_CHARS,
    SHOWN_CUT,
    SHOWN_LINES,
    SHOWN_WHOLE,
    LoopPart,
    LoopRules,
    LoopStep,
    LoopWindow,
    SettledParts,
    _file_changes,
    _listing_text,
    _read_note,
    _stretch_now,
    build_window,
    decision_type_of,
    deleted_since,
    fold_horizon,
    fold_pays,
    item_numbers,
    listing_entries,
    loop_step,
    newest_output,
    observation_kind,
    pointer_label,
    step_of_item,
    tree_change_item,
    viewed_lines,
)
from ctxdb.agent.trajectory import ObservationKind, parse_trajectory
from ctxdb.cli import main as cli_main
from ctxdb.forensics import NotFound
from ctxdb.request import RequestError
from ctxdb.tokens import (
    CACHED_PRICE_RATIO,
    HASHED_TEXT_KEPT_MAX_CHARS,
    LONG_RUN_CHARS,
    get_counter,
)

MODULE = "".join(f"def function_{n}(value):\n    return value + {n}\n" for n in range(1, 41))


def _tree(tmp_path):
    (tmp_path / "pkg").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_text(MODULE, encoding="utf-8")
    (tmp_path / "pkg" / "other.py").write_text("ALPHA = 1\nBETA = 2\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("first note\nsecond note\n", encoding="utf-8")
    return tmp_path


def _nl(start: int, end: int, text: str = MODULE) -> str:
    lines = text.splitlines()
    return "".join(f"{n:6}\t{lines[n - 1]}\n" for n in range(start, end + 1))


def _lines(start: int, end: int) -> str:
    return "".join(line + "\n" for line in MODULE.splitlines()[start - 1:end])


# the tests' own rules: what they check does not move with the measured defaults
RULES = LoopRules(fresh_outputs=4, fold_stride=4)


def _filler(count: int) -> list[LoopStep]:
    return [LoopStep(f"python -c 'print({n})'", f"{n}\n") for n in range(count)]


def test_the_fold_horizon_moves_in_strides():
    rules = LoopRules(fresh_outputs=4, fold_stride=4)
    assert [fold_horizon(done, rules) for done in range(14)] == \
        [0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8]
    unstrided = LoopRules(fresh_outputs=4, fold_stride=4, strided=False)
    assert [fold_horizon(done, unstrided) for done in range(7)] == [0, 0, 0, 0, 0, 1, 2]


def test_what_a_reading_command_printed(tmp_path):
    files = TreeFiles(_tree(tmp_path))
    cases = {
        "nl -ba pkg/mod.py | sed -n '3,6p'": (_nl(3, 6), {"pkg/mod.py": [3, 4, 5, 6]}),
        "sed -n '5,7p' pkg/mod.py": (_lines(5, 7), {"pkg/mod.py": [5, 6, 7]}),
        "cd /testbed/pkg && head -n 3 mod.py": (_lines(1, 3), {"pkg/mod.py": [1, 2, 3]}),
        # found in the file by their text: a regex address, a grep without -n, grep -r
        "sed -n '/def function_3(/,/return/p' pkg/mod.py": (_lines(5, 6),
                                                            {"pkg/mod.py": [5, 6]}),
        "grep 'return value + 2$' pkg/mod.py": ("    return value + 2\n", {"pkg/mod.py": [4]}),
        "grep -r BETA .": ("./pkg/other.py:BETA = 2\n", {"pkg/other.py": [2]}),
        "cat notes.txt": ("first note\nsecond note\n", {"notes.txt": [1, 2]}),
        "grep -n BETA pkg/other.py": ("2:BETA = 2\n", {"pkg/other.py": [2]}),
        "grep -n ALPHA pkg/other.py pkg/mod.py": ("pkg/other.py:1:ALPHA = 1\n",
                                                  {"pkg/other.py": [1]}),
        # a grep -n over nl's printout: grep's numbers (and context's ``N-``) come first
        "nl -ba pkg/mod.py | grep -n 'def function_3' -A 1": (
            "".join(f"{at}{mark}{line}" for at, mark, line in
                    zip((5, 6), ":-", _nl(5, 6).splitlines(keepends=True), strict=True)),
            {"pkg/mod.py": [5, 6]}),
        # an nl of a stream numbers the stream, and nl without -ba skips blank lines: the
        # lines are found by their text
        "sed -n '3,6p' pkg/mod.py | cat -n | grep -n function": (
            "1:     1\tdef function_2(value):\n", {"pkg/mod.py": [3]}),
        "sed -n '3,6p' pkg/mod.py | nl -ba | grep -n 'def function_3' -A 1": (
            "3:     3\tdef function_3(value):\n4-     4\t    return value + 3\n",
            {"pkg/mod.py": [5, 6]}),
        "nl spaced.py | grep -n -A1 'def g'": ("8:     4\tdef g():\n9-     5\t    return 1\n",
                                               {"spaced.py": [8, 9]}),
        # no numbering command: what looks like grep's number before nl's is the line's text
        "cat data.tsv | grep foo": ("7-9\tfoo\nplain foo\n", {"data.tsv": [2, 4]}),
        # a grep -n over a stream numbers the stream (hits ``N:``, context ``N-``, groups
        # apart by ``--``): the lines are found by their text after its number
        "sed -n '3,12p' pkg/mod.py | grep -n -A1 'function_[24]'": (
            "1:def function_2(value):\n2-    return value + 2\n--\n"
            "5:def function_4(value):\n6-    return value + 4\n",
            {"pkg/mod.py": [3, 4, 7, 8]}),
        "cat pkg/mod.py | grep -A1 'function_[24](' ": (
            "def function_2(value):\n    return value + 2\n--\n"
            "def function_4(value):\n    return value + 4\n",
            {"pkg/mod.py": [3, 4, 7, 8]}),
        "cat pkg/mod.py | grep -A1 --group-separator=== 'function_[24](' ": (
            "def function_2(value):\n    return value + 2\n==\n"
            "def function_4(value):\n    return value + 4\n",
            {"pkg/mod.py": [3, 4, 7, 8]}),
        # without context a line ``--`` is the file's; a pattern ``-n`` numbers nothing
        "cat q.sql | grep -e SELECT -e '^--$'": ("--\nSELECT 1;\n--\n",
                                                 {"q.sql": [1, 2, 3]}),
        "cat conf.yaml | grep -e -n -e ten": ("10: ten -n\n", {"conf.yaml": [2]}),
        "cat data.tsv | grep -n foo": ("2:7-9\tfoo\n4:plain foo\n", {"data.tsv": [2, 4]}),
        "head -n 8 pkg/mod.py | grep -inA 1 function_3": (
            "5:def function_3(value):\n6-    return value + 3\n", {"pkg/mod.py": [5, 6]}),
        # a grep's pattern that names a file of the tree is its pattern, not a file read
        "grep -n 'notes.txt' conf.yaml": ("3:see notes.txt\n", {"conf.yaml": [3]}),
    }
    (tmp_path / "spaced.py").write_text("import os\n\n\ndef f():\n    pass\n\n\n"
                                        "def g():\n    return 1\n", encoding="utf-8")
    (tmp_path / "data.tsv").write_text("a\tone\n7-9\tfoo\nc\tbar\nplain foo\n",
                                       encoding="utf-8")
    (tmp_path / "q.sql").write_text("--\nSELECT 1;\n--\n", encoding="utf-8")
    (tmp_path / "conf.yaml").write_text("a: 1\n10: ten -n\nsee notes.txt\n",
                                        encoding="utf-8")
    for command, (output, expected) in cases.items():
        assert viewed_lines(LoopStep(command, output), files) == expected, command
    # a grep that prints parts of lines (or counts, names) shows no lines of the file,
    # though a part may read as a whole line
    assert viewed_lines(LoopStep("cat pkg/mod.py | grep -o 'def function_3(value):'",
                                 "def function_3(value):\n"), files) is None
    # anything that writes, edits or runs code is not a reading
    for command in ("sed -i 's/a/b/' pkg/mod.py", "cat pkg/mod.py > copy.py",
                    "python -c 'print(1)'", "cat missing.py"):
        assert viewed_lines(LoopStep(command, "x\n"), files) is None, command


def test_commands_always_fresh_outputs_whole_folded_views_as_lines_of_the_tree_now(tmp_path):
    root = _tree(tmp_path)
    view = LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6))
    search = LoopStep("grep -rl BETA .", "./pkg/other.py\n")
    steps = [view, search, *_filler(6), LoopStep("grep -n function_3 pkg/mod.py", "5:x\n")]
    # the file changed after it was read: a folded view shows it as it is now
    changed = MODULE.replace("return value + 3", "return value - 3")
    (root / "pkg" / "mod.py").write_text(changed, encoding="utf-8")
    window = build_window(steps, TreeFiles(root), RULES)
    assert window.horizon == 4
    text = window.text()
    for step in steps:
        assert step.command in text  # every command, folded or not
    renderings = {step_of_item(part.item_no): part.rendering for part in window.parts}
    assert renderings[1, OUTPUT_PART] == SHOWN_LINES and renderings[2, OUTPUT_PART] == POINTER
    assert all(renderings[n, OUTPUT_PART] == SHOWN_WHOLE for n in range(5, 10))
    assert "6\treturn value - 3" not in text and "6\t    return value - 3" in text
    masked = f"[E{item_numbers(2)[1]} tool output masked: 1 line; files named: pkg/other.py]"
    assert masked in text, text
    # the same history on the same tree: the same bytes (a prompt cache's first need)
    assert build_window(steps, TreeFiles(root), RULES).text() == text


def test_a_view_found_by_its_text_moves_with_the_file_from_one_window_to_the_next(tmp_path):
    # a window remembers where each file's lines stand only while the file reads the same:
    # the next window of the run, over a file an edit shifted, finds the lines anew
    root = _tree(tmp_path)
    steps = [LoopStep("grep -A1 'def function_3' pkg/mod.py", _lines(5, 6)), *_filler(7)]
    header = f"[E{item_numbers(1)[1]} pkg/mod.py lines {{}}, as the tree holds them now]"
    before = build_window(steps, TreeFiles(root), RULES).text()
    assert header.format("5-6") in before and "5\tdef function_3(value):" in before, before
    (root / "pkg" / "mod.py").write_text("import os\nimport sys\n" + MODULE, encoding="utf-8")
    after = build_window(steps, TreeFiles(root), RULES).text()
    assert header.format("7-8") in after and "7\tdef function_3(value):" in after, after
    (root / "pkg" / "mod.py").write_text(MODULE, encoding="utf-8")
    assert build_window(steps, TreeFiles(root), RULES).text() == before


def test_a_view_of_a_file_deleted_since_says_so(tmp_path):
    root = _tree(tmp_path)
    (root / "scratch.py").write_text("print('probe')\n", encoding="utf-8")
    (root / "data.bin").write_bytes(b"\x00\x01")
    steps = [LoopStep("cat scratch.py", "print('probe')\n", returncode=0),
             # a file the tree holds but cannot show as text is not gone
             LoopStep("cat data.bin", "\x00\x01", returncode=0),
             # a failed read names a file that may never have been
             LoopStep("cat never.py", "cat: never.py: No such file or directory\n",
                      returncode=1),
             LoopStep("rm scratch.py", "", returncode=0), *_filler(5)]
    (root / "scratch.py").unlink()
    text = build_window(steps, TreeFiles(root), RULES).text()
    assert f"[E{item_numbers(1)[1]} tool output masked: 1 line; deleted since: scratch.py;" \
        in text, text
    assert text.count("deleted since") == 1, text
    # only a command's files are files: not a sed script, a grep pattern, an option's value
    files = TreeFiles(root)
    for command in ("sed -n 3,4p pkg/mod.py", "grep -n function_7 pkg/mod.py",
                    "head -n 2 pkg/mod.py", "tail -c 20 pkg/mod.py", "nl -b a pkg/mod.py",
                    "grep -rn --max-count 3 gone pkg", "sed -e 1p -n pkg/mod.py",
                    "grep -rn --include '*.py' 'def foo' pkg", "grep -rn --exclude-dir b x pkg",
                    "cat pkg/mod.py | grep -n foo -", "nl --number-separator ': ' pkg/mod.py",
                    "tail --pid 12 -f pkg/mod.py"):
        assert deleted_since(LoopStep(command, "x\n", returncode=0), files) == [], command
    for command in ("grep -e function_7 scratch.py", "sed -n 1p scratch.py",
                    "head -n 2 pkg/mod.py scratch.py", "cd pkg && cat ../scratch.py"):
        assert deleted_since(LoopStep(command, "x\n", returncode=0), files) == ["scratch.py"], \
            command
    # restored, it is a view again at the next fold
    (root / "scratch.py").write_text("print('probe')\n", encoding="utf-8")
    assert "1\tprint('probe')" in build_window(steps, TreeFiles(root), RULES).text()


def test_a_pointer_lists_the_names_its_output_was_the_first_to_show(tmp_path):
    root = _tree(tmp_path)
    script = LoopStep("python check.py", "function_3: 9\nmismatch in helper_total: 9\n")
    again = LoopStep("python check.py --again", "helper_total 9 check_total 8\nAlpha_case 1\n")
    steps = [script, again, *_filler(6)]
    window = build_window(steps, TreeFiles(root), RULES,
                          prompt_names=frozenset({"Alpha_case"}))
    text = window.text()
    first, second = (f"[E{item_numbers(n)[1]} tool output masked: 2 lines" for n in (1, 2))
    # the first to show a name lists it; the command's own names and the prompt's are known
    assert f"{first}; names: function_3, mismatch, helper_total]" in text, text
    assert f"{second}; names: check_total]" in text, text
    # the history alone decides it: the same list at every later step
    later = build_window([*steps, *_filler(4)], TreeFiles(root), RULES,
                         prompt_names=frozenset({"Alpha_case"}))
    assert f"{first}; names: function_3, mismatch, helper_total]" in later.text()
    without = build_window(steps, TreeFiles(root), RULES.without("pointer_names"))
    assert "names:" not in without.text()
    # an output that printed nothing says so: no lines are hidden behind its pointer
    quiet = build_window([script, again, LoopStep("touch new.py", ""), *_filler(6)],
                         TreeFiles(root), RULES).text()
    assert f"[E{item_numbers(3)[1]} tool output: no output]" in quiet and "0 lines" not in quiet
    # no runs of underscores (pytest's rules), nothing from a binary file's bytes
    noisy = [LoopStep("pytest -q", "_____ test_total _____\nFFFFF.\nFAILED\n"),
             LoopStep("cat data.bin", "\x00\x01UJ50 uc5y\ufffdABCD"),
             # the harness's own boilerplate names nothing of the run
             LoopStep(None, "Please always provide EXACTLY ONE action",
                      kind=ObservationKind.FORMAT_ERROR),
             # ...but what it showed is shown: a later output does not list it as new
             LoopStep("python run.py", "EXACTLY Please special_total\n"), *_filler(6)]
    pointers = build_window(noisy, TreeFiles(root), RULES).text()
    assert "3 lines; names: test_total, FAILED]" in pointers, pointers
    assert f"[E{item_numbers(2)[1]} tool output masked: 1 line]" in pointers, pointers
    assert f"[E{item_numbers(3)[1]} harness note masked: 1 line]" in pointers, pointers
    assert f"[E{item_numbers(4)[1]} tool output masked: 1 line; names: special_total]" \
        in pointers, pointers
    # at most POINTER_NAMES_MAX of them
    many = LoopStep("python list.py", " ".join(f"name_{n}" for n in range(50)))
    listed = build_window([many, *_filler(8)], TreeFiles(root), RULES).parts[1].text
    assert listed.count("name_") == POINTER_NAMES_MAX and "name_0," in listed
    # an absolute path's directories are where the harness keeps files, no names (the
    # file's own name is; a relative path's and a URL's are)
    placed = LoopStep("python run.py", "/opt/miniconda3/envs/testbed/lib/python3.9/site-"
                      "packages/_pytest/config.py: helper_total\nsee sympy/polys/rings.py and "
                      "https://docs.example.org/stable/\n")
    pointer = build_window([placed, *_filler(8)], TreeFiles(root), RULES).parts[1].text
    names = pointer.split("; names: ")[1].rstrip("]\n").split(", ")
    assert {"config", "helper_total", "polys", "rings", "example"} <= set(names), names
    assert not {"miniconda3", "envs", "testbed", "site", "packages", "_pytest"} & set(names)
    # a long output's names too (remembered by its digest, not by the text)
    long = LoopStep("python big.py", ". " * HASHED_TEXT_KEPT_MAX_CHARS + "far_name\n")
    for _ in range(2):
        pointer = build_window([long, *_filler(8)], TreeFiles(root), RULES).parts[1].text
        assert pointer.endswith("; names: far_name]\n\n"), pointer
    # a traceback's own words are no names: its frames' functions are
    raised = ('Traceback (most recent call last):\n  File "/testbed/run.py", line 5, in '
              '<module>\n    main()\n  File "/testbed/pkg/mod.py", line 9, in helper_total\n'
              '    raise ValueError(bad_total)\nValueError: bad_total\n\nDuring handling of '
              'the above exception, another exception occurred:\n\nTraceback (most recent '
              'call last):\r\n  File "<frozen importlib._bootstrap>", line 9, in <listcomp>\n'
              'KeyError: missing_key\n')
    pointer = build_window([LoopStep("python run.py", raised, returncode=1), *_filler(8)],
                           TreeFiles(root), RULES).parts[1].text
    assert pointer.endswith("; names: main, helper_total, bad_total, missing_key]\n\n"), \
        pointer
    # nor pytest's header (the runner's and the machine's words, a project's banner): they
    # crowded out the failing test's name; a header with no collected line loses its rule
    header = ("============================= test session starts ==============================\n"
              "platform linux -- Python 3.9.20, pytest-7.4.0, pluggy-1.3.0\nRunning tests "
              "with Astropy version 5.2.\nPackage versions:\nNumpy: 1.25.2\nrootdir: /testbed"
              "\nplugins: hypothesis-6.82.6\ncollected 5 items\n\n")
    failed = header + ("pkg/tests/test_mod.py ....F\n\n= FAILURES =\n__ test_ndarray_mixin __\n"
                       "E   assert_total_error\n")
    cut = ("============================= test session starts ==============================\n"
           "platform linux -- Python 3.9.20\nImportError while loading conftest_total\n")
    pointers = build_window([LoopStep("pytest pkg", failed, returncode=1),
                             LoopStep("pytest pkg -x", cut, returncode=4), *_filler(8)],
                            TreeFiles(root), RULES)
    names = [part.text.split("; names: ")[1].rstrip("]\n").split(", ")
             for part in pointers.parts[1:4:2]]
    assert names[0] == ["tests", "test_mod", "FAILURES", "test_ndarray_mixin",
                        "assert_total_error"], names
    assert "session" not in names[1] and "conftest_total" in names[1], names


LONG_LISTING = """total 24
drwxr-xr-x 1 root root 4096 Nov 18 10:00 .
drwxr-xr-x 1 root root 4096 Nov 18 10:00 ..
-rw-r--r-- 1 root root  812 Nov 18 10:00 README.rst
drwxr-xr-x 3 root root 4096 Nov 18 10:00 pkg
lrwxrwxrwx 1 root root    9 Nov 18 10:00 latest -> pkg/mod.py
drwxr-xr-x 5 root root 4096 Nov 18 10:00 tests
-rw-r--r-- 1 root root  301 Nov 18 10:00 tox.ini
"""
RECURSIVE_LISTING = (".:\nREADME.rst\npkg\ntests\n\n./pkg:\n__init__.py\nmod.py\n\n"
                     "./tests:\ntest_mod.py\n")


def test_a_masked_listing_keeps_its_entries(tmp_path):
    root = _tree(tmp_path)
    steps = [LoopStep("ls -la", LONG_LISTING), LoopStep("ls -R", RECURSIVE_LISTING),
             *_filler(8)]
    window = build_window(steps, TreeFiles(root), RULES)
    first, second = window.parts[1].text, window.parts[3].text
    assert window.parts[1].rendering == POINTER
    # ls -l's name column alone, a directory marked, a link by its own name, no . or ..
    assert first == (f"[E{item_numbers(1)[1]} tool output masked: 8 lines; it listed:\n"
                     "README.rst  pkg/  latest  tests/  tox.ini]\n\n"), first
    # ls -R: a line per directory, as its output heads them
    assert "\n.: README.rst  pkg  tests\n./pkg: __init__.py  mod.py\n./tests: test_mod.py]" \
        in second, second
    without = build_window(steps, TreeFiles(root), RULES.without("listings")).text()
    assert "tox.ini" not in without and "it listed" not in without
    # at most LISTING_ENTRIES_MAX entries, the shallowest directories first
    deep = "".join(f"./deep/d{n}:\n" + "".join(f"f{n}_{m}.py\n" for m in range(10)) + "\n"
                   for n in range(LISTING_ENTRIES_MAX))
    big = LoopStep("ls -R", ".:\ntop.txt\n\n" + deep)
    shown = build_window([big, *_filler(9)], TreeFiles(root), RULES).parts[1].text
    assert "\n.: top.txt\n./deep/d0: f0_0.py" in shown, shown[:300]
    assert shown.count(".py") == LISTING_ENTRIES_MAX - 1
    assert f"(and {LISTING_ENTRIES_MAX * 10 - LISTING_ENTRIES_MAX + 1} more)" in shown
    # a find is a listing; anything that writes, runs or prints files is not
    assert listing_entries(LoopStep("find . -name '*.py'", "./pkg/mod.py\n./setup.py\n")) \
        == [("", ["./pkg/mod.py", "./setup.py"])]
    for command in ("find . -name '*.pyc' -delete", "ls > listing.txt", "ls && python x.py",
                    "cat pkg/mod.py", "find . -exec grep -l x {} +", "ls $(python x.py)",
                    "ls `python x.py`", "ls | sort -o out.txt", "tree -o out.txt",
                    "ls pkg && grep -n 'def ' pkg/mod.py", "ls && head -5 setup.py",
                    "ls | grep -r x .", "ls | grep -nr x", "ls | grep --recursive x"):
        assert listing_entries(LoopStep(command, "pkg\n")) is None, command
    assert listing_entries(LoopStep("find . -name '*.py' 2>/dev/null | head -n 5", "./a.py\n")) \
        == [("", ["./a.py"])]
    # ls -l's other shapes: ISO dates, a device's numbers, -s's blocks, no group (-o)
    for line in ("drwxr-xr-x 2 root root 4096 2024-01-01 10:00 tests",
                 "-rw-r--r-- 1 root root 12 2024-01-01 10:00:00.000000000 +0000 tests",
                 "crw-rw-rw- 1 root root 1, 3 Nov 18 10:00 tests",
                 "4 -rw-r--r-- 1 root root 12 Nov 18 10:00 tests",
                 "-rw-r--r-- 1 root 12 Nov 18 10:00 tests"):
        entries = listing_entries(LoopStep("ls -la", line + "\n"))
        assert entries in ([("", ["tests/"])], [("", ["tests"])]), (line, entries)
    # ls -R heads a directory whose name holds spaces as any other (first, or after a
    # blank line or ls's own error); inside a group such a name ending in ":" is an entry
    spaced = ".:\nmy dir\nodd name:\n\n./my dir:\nmod.py\n"
    assert listing_entries(LoopStep("ls -R", spaced)) \
        == [(".", ["my dir", "odd name:"]), ("./my dir", ["mod.py"])]
    missing = "ls: cannot access 'gone': No such file or directory\nmy dir:\nmod.py\n"
    assert listing_entries(LoopStep("ls gone 'my dir'", missing)) == [("my dir", ["mod.py"])]
    # tree: branches and its summary line go, a link by its own name
    tree = ".\n├── pkg\n│   └── mod.py -> ../mod.py\n└── -dash.py\n\n1 directory, 2 files\n"
    assert listing_entries(LoopStep("tree", tree)) == [("", ["pkg", "mod.py", "-dash.py"])]
    # a find's paths: the shallowest kept first under the cap
    found = "".join(f"./a/f{n}.py\n" for n in range(LISTING_ENTRIES_MAX + 10)) + "./tox.ini\n"
    text, left = _listing_text(listing_entries(LoopStep("find .", found)))
    assert text.startswith("./tox.ini  ./a/f0.py") and left == 11, text[:80]


def test_a_view_shows_only_lines_no_earlier_view_shows_and_leaves_when_out_of_play(tmp_path):
    root = _tree(tmp_path)
    first = LoopStep("nl -ba pkg/mod.py | sed -n '1,6p'", _nl(1, 6))
    second = LoopStep("nl -ba pkg/mod.py | sed -n '4,8p'", _nl(4, 8))
    window = build_window([first, second, *_filler(6)], TreeFiles(root), RULES)
    view = [p for p in window.parts if step_of_item(p.item_no) == (2, OUTPUT_PART)][0]
    assert view.rendering == SHOWN_LINES and "lines 7-8," in view.text
    assert "\n4\t" not in view.text
    # a file no command named for FILE_IN_PLAY_STEPS steps before the horizon: its views go
    later = [first, *_filler(FILE_IN_PLAY_STEPS + 8)]
    part = build_window(later, TreeFiles(root), RULES).parts[1]
    assert part.rendering == POINTER and part.rule == OUT_OF_PLAY_RULE  # why says so
    with ContextStore.open(tmp_path / "why.db") as store:  # with which file, since when
        decision = construct_step(store, run_id="r", instance_id="i", task="t", steps=later,
                                  tree=root, prefix=PREFIX, rules=RULES).decision_id
        render = store.why(decision, f"E{item_numbers(1)[1]}")[0]
    assert (render["driver"], render["detail"]) == (
        OUT_OF_PLAY_RULE, "pkg/mod.py not named from step 1 to the fold at step 12; "
        "fold horizon: step 12")
    filler_output = build_window(later, TreeFiles(root), RULES).parts[3]
    assert filler_output.rendering == POINTER and filler_output.rule == "folded"


def test_a_test_run_is_told_by_the_program_that_runs_not_by_a_word_in_the_command():
    def kind(command: str) -> str:
        return observation_kind(LoopStep(command, "1 passed\n", returncode=0))

    for command in ("pytest tests/test_mod.py", "python -m pytest -x tests",
                    "/usr/bin/python3 -m unittest pkg.tests", "bin/test sympy/core",
                    "cd pkg && python -m pytest", "git stash && bin/test sympy/core",
                    "python -c 'import pytest; pytest.main([\"tests\"])'",
                    "timeout 60 pytest tests", "tox -e py311", "./bin/test sympy/core",
                    "python - <<'EOF'\nimport pytest\npytest.main(['-q'])\nEOF"):
        assert kind(command) == "test_output", command
    # naming a runner is not running it: reading, listing, installing, or a test file
    # written by a here-document (its text names pytest)
    for command in ("cat tox.ini", "ls bin/test", "pip install pytest",
                    "nl -ba src/_pytest/unittest.py | sed -n '1,9p'", "which pytest",
                    "grep -n pytest setup.cfg", "git checkout src/_pytest/unittest.py",
                    "cat <<'EOF' > test_fix.py\nimport pytest\n\ndef test_x():\n"
                    "    assert pytest\nEOF", "cat <<'EOF' | tee test_fix.py\nimport pytest\nEOF",
                    "test -f tox.ini", "[ -d bin/test ]", "python -m pip install pytest",
                    "/bin/cat tox.ini",
                    # a module of that name inside a package is a library, not a runner
                    "python -c 'from sympy.testing.pytest import raises; print(raises)'",
                    "python - <<'EOF'\nfrom sympy.testing.pytest import raises\nEOF"):
        assert kind(command) == "tool_output", command


def test_a_traceback_a_reading_command_printed_from_a_file_is_no_failure():
    doctest = ("   10\t    >>> f()\n   11\t    Traceback (most recent call last):\n"
               "   12\t    ValueError\n")
    assert observation_kind(LoopStep("nl -ba pkg/mod.py | sed -n '10,12p'", doctest,
                                     returncode=0)) == "tool_output"
    raised = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError\n"
    assert observation_kind(LoopStep("python x.py", raised, returncode=1)) == "traceback"
    # a log the agent printed holds a real one
    for printed in ("cat /tmp/out", "tail -30 test.log", "cat out.txt", "grep -A5 Trace run.log"):
        assert observation_kind(LoopStep(printed, raised, returncode=0)) == "traceback", printed


def test_a_file_at_the_root_is_named_by_its_name_not_inside_another(tmp_path):
    root = _tree(tmp_path)
    (root / "utils.py").write_text("def helper():\n    return 1\n", encoding="utf-8")
    view = LoopStep("cat utils.py", "def helper():\n    return 1\n")

    def first_output(later: str) -> LoopPart:
        steps = [view, *[LoopStep(later, "ok\n") for _ in range(FILE_IN_PLAY_STEPS + 11)]]
        window = build_window(steps, TreeFiles(root), RULES)
        return [p for p in window.parts if step_of_item(p.item_no) == (1, OUTPUT_PART)][0]

    # ``python test_utils.py`` does not name utils.py: the view goes out of play
    assert first_output("python test_utils.py").rendering == POINTER
    assert first_output("python utils.py").rendering == SHOWN_LINES
    # its name after a directory is a whole word
    assert first_output("python /testbed/utils.py").rendering == SHOWN_LINES


def test_a_long_listing_folds_as_soon_as_it_is_no_longer_fresh(tmp_path):
    root = _tree(tmp_path)
    # a run's opening ls -R: its entries are far less than its text
    deep = "".join(f"./pkg/sub{n}:\n"
                   + "".join(f"a_rather_long_module_name_{n}_{m}.py\n" for m in range(6))
                   + "\n" for n in range(30))
    listing = LoopStep("ls -R", ".:\npkg\nsetup.py\n\n" + deep)
    short = LoopStep("ls pkg", "mod.py\nother.py\n")  # its entries are most of its text
    # a later output repeating the listing's lines: no note may point at a folded listing
    repeat = LoopStep("find pkg/sub0 -name '*.py'", "".join(
        f"a_rather_long_module_name_0_{m}.py\n" for m in range(6)))
    steps = [short, listing, repeat, *_filler(6)]
    assert fold_horizon(5, RULES) == 0 and fold_horizon(6, RULES) == 0

    def output(done: int, rules: LoopRules = RULES, step: int = 2) -> LoopPart:
        window = build_window(steps[:done], TreeFiles(root), rules)
        return [p for p in window.parts if step_of_item(p.item_no) == (step, OUTPUT_PART)][0]

    # among the FRESH_OUTPUTS newest it is shown whole; one step later it is its entries
    assert output(5).rendering == SHOWN_WHOLE
    early = output(6)
    assert early.rendering == POINTER and early.rule == "folded listing, early: its entries"
    assert "it listed (and" in early.text
    assert "./pkg/sub0: a_rather_long_module_name_0_0.py" in early.text
    # the entries the stride folds it to, the same text: the window does not change again
    assert fold_horizon(9, RULES) >= 2 and output(9).text == early.text
    assert output(7).text == early.text
    # the later output's repeated lines are shown, not pointed at the folded listing
    assert output(5, step=3).rendering == SHOWN_CUT
    assert output(6, step=3).rendering == SHOWN_WHOLE
    # a listing whose entries are most of its text waits for the stride
    assert output(6, step=1).rendering == SHOWN_WHOLE
    assert output(6, RULES.without("early_listings")).rendering == SHOWN_WHOLE
    assert output(6, RULES.without("listings")).rendering == SHOWN_WHOLE
    # the share, each side of EARLY_LISTING_SHARE_MAX: a listing of 5 / 4 or 5 / 2 times
    # the entries its fold keeps (the rest counted)
    for listed, folds in ((LISTING_ENTRIES_MAX * 5 // 4, False),
                          (LISTING_ENTRIES_MAX * 5 // 2, True)):
        names = "".join(f"entry_with_a_long_name_{n}.py\n" for n in range(listed))
        step = LoopStep("ls pkg", names)
        part = build_window([step, *_filler(4)], TreeFiles(root), RULES).parts[1]
        # the stride's fold of it, past the horizon: what the early fold would show
        folded = build_window([step, *_filler(8)], TreeFiles(root), RULES).parts[1]
        share = len(folded.text) / len(step.shown)
        assert (share < EARLY_LISTING_SHARE_MAX) == folds, share
        assert (part.rendering == POINTER) == folds, (listed, share)


def test_a_long_view_shows_past_its_first_lines_only_what_brings_a_name(tmp_path):
    root = _tree(tmp_path)
    tail = "NAMED_BEFORE = 1\nBRAND_NEW_NAME = 2\n"
    (root / "pkg" / "mod.py").write_text(MODULE + tail, encoding="utf-8")
    rules = dataclasses.replace(RULES, view_lines_whole=10)
    steps = [LoopStep("echo NAMED_BEFORE", "NAMED_BEFORE\n"),
             LoopStep("cat pkg/mod.py", MODULE + tail), *_filler(7)]
    view = build_window(steps, TreeFiles(root), rules).parts[3]
    assert view.rendering == SHOWN_LINES and "lines 1-82," in view.text
    lines = view.text.splitlines()[1:-1]
    # the first 10 lines whole; then each definition, a mark for each run left out
    # (the returns: no name the window lacks), the new name, not the one named before
    assert lines[:10] == [f"{n}\t{line}" for n, line in enumerate(MODULE.splitlines()[:10], 1)]
    assert lines[10:14] == ["11\tdef function_6(value):", ELIDED_LINES,
                            "13\tdef function_7(value):", ELIDED_LINES]
    assert lines[-2:] == [ELIDED_LINES, "82\tBRAND_NEW_NAME = 2"]
    assert "NAMED_BEFORE = 1" not in view.text and "return value + 6" not in view.text
    # a later view of a line left out shows it (it was not shown above)
    steps.insert(2, LoopStep("nl -ba pkg/mod.py | sed -n '12p'", _nl(12, 12)))
    later = build_window(steps, TreeFiles(root), rules).parts[5]
    assert later.text.splitlines()[1:-1] == ["12\t    return value + 6"]
    # the rule off: every line
    whole = build_window(steps[:2] + steps[3:], TreeFiles(root),
                         rules.without("long_views")).parts[3]
    assert ELIDED_LINES not in whole.text and "81\tNAMED_BEFORE = 1" in whole.text


def test_a_view_of_lines_chosen_by_number_is_shown_whole(tmp_path):
    """An agent that printed lines 1-82 by number asked for each of them (GPT-5-mini's
    sphinx-8721 replaced a line 124 lines into a `sed -n '1,240p'` it had read): a long
    view's cut is for a whole file printed, or lines a pattern picked."""
    root = _tree(tmp_path)
    rules = dataclasses.replace(RULES, view_lines_whole=10)
    other = "ALPHA = 1\n"
    for command, printed, whole in (
            ("nl -ba pkg/mod.py | sed -n '1,80p'", _nl(1, 80), True),
            ("sed -n '1,80p' pkg/mod.py", _lines(1, 80), True),
            ("cd pkg && sed --quiet '1,80p' mod.py", _lines(1, 80), True),
            ("head -n 80 pkg/mod.py", _lines(1, 80), True),
            ("cat pkg/mod.py | head -80", _lines(1, 80), True),
            ("tail -n 80 pkg/mod.py", _lines(1, 80), True),
            # the whole file printed, one way or another
            ("cat pkg/mod.py", MODULE, False),
            ("sed '1,80p' pkg/mod.py", MODULE + _lines(1, 80), False),  # no -n: all, twice
            ("tail -n +1 pkg/mod.py", MODULE, False),
            ("head -c 3000 pkg/mod.py", MODULE, False),
            # beside another file, or picked by a pattern
            ("cat pkg/mod.py; head -n 1 pkg/other.py", MODULE + other, False),
            ("grep -n value pkg/mod.py", "".join(
                f"{n}:{line}\n" for n, line in enumerate(MODULE.splitlines(), 1)
                if "value" in line), False)):
        steps = [LoopStep(command, printed), *_filler(8)]
        view = build_window(steps, TreeFiles(root), rules).parts[1]
        assert view.rendering == SHOWN_LINES, command
        assert (ELIDED_LINES not in view.text) == whole, command
        assert ("\n78\t    return value + 39\n" in view.text) == whole, command
        # the rule off: a long view like any other
        off = build_window(steps, TreeFiles(root), rules.without("chosen_ranges")).parts[1]
        assert ELIDED_LINES in off.text, command
    # a turn of several actions: each reading on its own, the chosen range whole
    turn = LoopStep("cat pkg/other.py\nsed -n '1,80p' pkg/mod.py", other + _lines(1, 80),
                    actions=(LoopStep("cat pkg/other.py", other, returncode=0),
                             LoopStep("sed -n '1,80p' pkg/mod.py", _lines(1, 80),
                                      returncode=0)))
    view = build_window([turn, *_filler(8)], TreeFiles(root), rules).parts[1]
    assert "1\tALPHA = 1" in view.text and ELIDED_LINES not in view.text, view.text
    assert "\n78\t    return value + 39\n" in view.text


def test_a_listing_read_once_keeps_neither_its_step_nor_its_text_alive(tmp_path):
    """Every window past a listing asks for its folded form: it is read once and
    remembered by a digest, so a run's steps (a long ``ls -R`` among them) are freed with
    the run."""
    root = _tree(tmp_path)
    output = "".join(f"./pkg/sub{n}:\n" + "".join(f"module_{n}_{m}.py\n" for m in range(40))
                     + "\n" for n in range(100))
    assert len(output) > HASHED_TEXT_KEPT_MAX_CHARS  # a text the digests stand in for
    listing = LoopStep("ls -R", output)
    steps = [listing, *_filler(8)]
    first = build_window(steps, TreeFiles(root), RULES).parts[1]
    again = build_window(steps, TreeFiles(root), RULES).parts[1]
    assert first.rendering == POINTER and "it listed (and" in first.text
    assert again.text == first.text
    freed = weakref.ref(listing)
    del listing, steps, first, again
    gc.collect()
    assert freed() is None


def test_what_a_long_views_tail_keeps(tmp_path):
    root = _tree(tmp_path)
    head = "".join(f"HEAD_NAME_{n} = {n}\n" for n in range(1, 11))
    tail = ("HEAD_NAME_3 = 0\n"  # a name its first lines show
            "PROMPT_NAME = 0\n"  # a name the harness's prompt shows
            "def HEAD_NAME_4():\n"  # a definition, though its name is shown
            "TAIL_NAME = 1\n"  # a new name...
            "TAIL_NAME = 2\n")  # ...shown once
    (root / "data.py").write_text(head + tail, encoding="utf-8")
    rules = dataclasses.replace(RULES, view_lines_whole=10)
    steps = [LoopStep("cat data.py", head + tail), *_filler(8)]
    window = build_window(steps, TreeFiles(root), rules,
                          prompt_names=frozenset({"PROMPT_NAME"}))
    assert window.parts[1].text.splitlines()[11:-1] == [
        ELIDED_LINES, "13\tdef HEAD_NAME_4():", "14\tTAIL_NAME = 1", ELIDED_LINES]
    # a tail with nothing new: the first lines, then one mark; the header names where the
    # view ended, so the reader sees lines were left out
    (root / "data.py").write_text(head + "HEAD_NAME_1 = 0\n" * 5, encoding="utf-8")
    steps[0] = LoopStep("cat data.py", head + "HEAD_NAME_1 = 0\n" * 5)
    view = build_window(steps, TreeFiles(root), rules).parts[1].text.splitlines()
    assert view[0].startswith("[E2 data.py lines 1-15,") and view[11:-1] == [ELIDED_LINES]
    # a view of several files: a short file's names count for the next file's tail
    (root / "short.py").write_text("SHORT_NAME = 1\n", encoding="utf-8")
    (root / "data.py").write_text(head + "SHORT_NAME = 2\n", encoding="utf-8")
    printed = ["short.py:1:SHORT_NAME = 1", *(f"data.py:{n}:HEAD_NAME_{n} = {n}"
                                            for n in range(1, 11)), "data.py:11:SHORT_NAME = 2"]
    steps[0] = LoopStep("grep -n NAME short.py data.py", "\n".join(printed) + "\n")
    view = build_window(steps, TreeFiles(root), rules).parts[1].text.splitlines()
    assert view[:2] == ["[E2 short.py line 1, as the tree holds them now]", "1\tSHORT_NAME = 1"]
    assert view[-2:] == [ELIDED_LINES, ""] and "SHORT_NAME = 2" not in "\n".join(view)


def test_a_folded_view_follows_the_lines_it_printed_through_edits(tmp_path):
    root = _tree(tmp_path)
    mod = root / "pkg" / "mod.py"
    # a cat's line an edit changed since: between two lines found, it is the file's line
    mod.write_text(MODULE.replace("value + 3\n", "value - 3\n"), encoding="utf-8")
    steps = [LoopStep("cat pkg/mod.py", MODULE), *_filler(8)]
    view = build_window(steps, TreeFiles(root), RULES).parts[1].text
    assert "5\tdef function_3(value):\n6\t    return value - 3\n7\tdef function_4" in view
    # ...but not a stretch more than twice as long as what was printed between them
    mod.write_text(MODULE.replace("return value + 3\n", "x = 1\n" * 3 + "return value - 3\n"),
                   encoding="utf-8")
    by_pattern = [LoopStep("sed -n '/def function_3/,/def function_4/p' pkg/mod.py",
                           _lines(5, 7)), *_filler(8)]
    view = build_window(by_pattern, TreeFiles(root), RULES).parts[1].text
    assert "5\tdef function_3(value):\n10\tdef function_4" in view and "x = 1" not in view
    # a whole file's cat is a stretch: what an edit put in it is shown as the file reads now
    view = build_window(steps, TreeFiles(root), RULES).parts[1].text
    assert "5\tdef function_3(value):\n6\t    x = 1\n7\tx = 1\n8\tx = 1\n9\treturn value - 3\n" \
        "10\tdef function_4" in view
    # numbered lines that moved (lines inserted above): where they are now, a changed one
    # moved with its neighbours
    mod.write_text("# a\n# b\n" + MODULE.replace("value + 8\n", "value - 8\n"),
                   encoding="utf-8")
    for command, printed in (("grep -n function_7 pkg/mod.py", "13:def function_7(value):\n"),
                             ("nl -ba pkg/mod.py | sed -n '15,16p'", _nl(15, 16))):
        view = build_window([LoopStep(command, printed), *_filler(8)], TreeFiles(root),
                            RULES).parts[1].text
        assert view.startswith("[E2 pkg/mod.py line") and (
            "15\tdef function_7(value):" in view or
            "17\tdef function_8(value):\n18\t    return value - 8" in view), view
    # a repeated line alone proves no move: the one the agent edited stays where it was
    todo = root / "todo.py"
    todo.write_text("".join(f"x{n} = 1\n# TODO\n" for n in range(5)), encoding="utf-8")
    hits = "".join(f"{n}:# TODO\n" for n in (2, 4, 6, 8, 10))
    todo.write_text(todo.read_text().replace("x2 = 1\n# TODO", "x2 = 1\n# done"))
    view = build_window([LoopStep("grep -n TODO todo.py", hits), *_filler(8)],
                        TreeFiles(root), RULES).parts[1].text
    assert [line.split("\t")[0] for line in view.splitlines()[1:-1]] == ["2", "4", "6", "8", "10"]
    assert "6\t# done" in view
    # no bridge over a harness's markup (a cut output) or from another file's lines
    # (mini-swe-agent's template: a newline after the head and the tail; a head cut at a
    # line's end ends with an empty line, so its last line is whole)
    sent = ("<returncode>0</returncode>\n<output_head>\n" + _lines(1, 6) + "\n</output_head>"
            "\n<elided_chars>\n90 characters elided\n</elided_chars>\n<output_tail>\n"
            + _lines(9, 12) + "\n</output_tail>")
    mod.write_text(MODULE, encoding="utf-8")
    cut = LoopStep("cat pkg/mod.py", MODULE, kind=ObservationKind.OUTPUT_CUT, observation=sent)
    view = build_window([cut, *_filler(8)], TreeFiles(root), RULES).parts[1].text
    # the tail's first line is never taken as read: a cut by characters can begin inside
    # it (nothing tells a whole one apart)
    assert "6\t    return value + 3\n10\t    return value + 5" in view, view
    # cut inside lines: the head's last and the tail's first are partial, and the tail's
    # can begin inside a line's number (``  1247`` read as 247): neither is taken as read
    numbered = _nl(1, 80, MODULE)
    head = numbered[:400]
    tail = numbered[numbered.index("    71\t") + len("    7"):]  # "1\tdef function_36…"
    assert not head.endswith("\n") and tail.startswith("1\tdef function_36")
    sent = ("<returncode>0</returncode>\n<output_head>\n" + head + "\n</output_head>\n"
            "<elided_chars>\nN characters elided\n</elided_chars>\n<output_tail>\n" + tail
            + "\n</output_tail>")
    cut = LoopStep("nl -ba pkg/mod.py", numbered, kind=ObservationKind.OUTPUT_CUT,
                   observation=sent)
    lines = viewed_lines(cut, TreeFiles(root))["pkg/mod.py"]
    head_whole = head.count("\n")  # the lines before the one the head cut through
    tail_first = 80 - tail.count("\n") + 1  # the line the tail begins inside
    assert lines == [*range(1, head_whole + 1), *range(tail_first + 1, 81)], lines
    both = LoopStep("head -n 2 pkg/other.py; cat notes.txt",
                    "ALPHA = 1\nBETA = 2\nfirst note\nsecond note\n")
    (root / "pkg" / "other.py").write_text("ALPHA = 1\nGAMMA = 3\nBETA = 2\n", encoding="utf-8")
    assert viewed_lines(both, TreeFiles(root)) == {"pkg/other.py": [1, 3], "notes.txt": [1, 2]}


def test_a_view_holds_only_lines_the_output_printed_of_that_file(tmp_path):
    """From a cold review: lines the agent never read were shown as read (or at the wrong
    numbers) when a grep without -n printed a line starting with digits, a grep's context
    lines were each looked for from the top, a file held a form feed, or one output held
    several files' lines; and a turn's whole-file cat beside a view left no trace."""
    root = _tree(tmp_path)
    files = TreeFiles(root)
    log = "".join(f"2024-01-{n:02} INFO ok\n" for n in range(1, 30)) + "2024-02-01 ERROR full\n"
    (root / "server.log").write_text(log, encoding="utf-8")
    # no -n: ``2024-02-01`` is the line's text, not its number
    assert viewed_lines(LoopStep("grep ERROR server.log", "2024-02-01 ERROR full\n"),
                        files) == {"server.log": [30]}
    assert viewed_lines(LoopStep("grep -n ERROR server.log", "30:2024-02-01 ERROR full\n"),
                        files) == {"server.log": [30]}
    # a group of context lines is found as a run: its common line is the group's own
    printed = "def function_7(value):\n    return value + 7\n--\ndef function_9(value):\n" \
              "    return value + 9\n"
    (root / "pkg" / "twice.py").write_text("x = 1\n    return y\ndef gamma(x):\n    y = x\n"
                                           "    return y\n", encoding="utf-8")
    assert viewed_lines(LoopStep("grep -A1 'def gamma' pkg/twice.py",
                                 "def gamma(x):\n    y = x\n"), files) == {
        "pkg/twice.py": [3, 4]}
    assert viewed_lines(LoopStep("grep -A2 'def gamma' pkg/twice.py",
                                 "def gamma(x):\n    y = x\n    return y\n"), files) == {
        "pkg/twice.py": [3, 4, 5]}
    assert viewed_lines(LoopStep("grep -A1 'function_[79](' pkg/mod.py", printed), files) == {
        "pkg/mod.py": [13, 14, 17, 18]}
    # a form feed, a lone carriage return, U+2028: inside a line, as nl and sed count
    (root / "paged.py").write_text("a = 1\n\x0c\nb = 2\r\nc = '\u2028'\nd = 4\n",
                                   encoding="utf-8")
    assert files("paged.py") == ["a = 1", "\x0c", "b = 2", "c = '\u2028'", "d = 4"]
    assert viewed_lines(LoopStep("nl -ba paged.py | sed -n '5p'", "     5\td = 4\n"),
                        TreeFiles(root)) == {"paged.py": [5]}
    # ...and its view, read back at the next step, holds as the tree does: no note of
    # changed lines (the view's text was split as str.splitlines splits)
    numbered = "".join(f"{n:6}\t{line}\n" for n, line in enumerate(files("paged.py"), 1))
    paged = [LoopStep("nl -ba paged.py", numbered), *_filler(8)]
    first = build_window(paged, TreeFiles(root), RULES)
    assert "2\t\x0c\n" in first.text()
    later = build_window([*paged, LoopStep("echo same", "same\n")], TreeFiles(root), RULES,
                         settled=SettledParts.of(first, paged, RULES))
    assert "as it reads now" not in later.text(), later.text()
    # one output, two files: a grep's hit without its file's name is taken only where its
    # number reads as printed; other commands' lines go to the files in the order printed
    # (a line the current file holds is its own: b.py's first line, ALPHA, goes to
    # other.py, which holds it too)
    (root / "pkg" / "b.py").write_text("ALPHA = 1\nGAMMA = 7\n", encoding="utf-8")
    assert viewed_lines(LoopStep("grep -n BETA pkg/other.py; grep -n GAMMA pkg/b.py",
                                 "2:BETA = 2\n2:GAMMA = 7\n"), files) == {
        "pkg/other.py": [2], "pkg/b.py": [2]}
    # (a hit both files hold at its number is true of each)
    assert viewed_lines(LoopStep("grep -n ALPHA pkg/other.py; grep -n GAMMA pkg/b.py",
                                 "1:ALPHA = 1\n2:GAMMA = 7\n"), files) == {
        "pkg/other.py": [1], "pkg/b.py": [1, 2]}
    assert viewed_lines(LoopStep("head -n 2 pkg/other.py; cat pkg/b.py",
                                 "ALPHA = 1\nBETA = 2\nALPHA = 1\nGAMMA = 7\n"), files) == {
        "pkg/other.py": [1, 2], "pkg/b.py": [2]}
    assert viewed_lines(LoopStep("head -n 2 pkg/b.py; head -n 2 pkg/other.py",
                                 "ALPHA = 1\nGAMMA = 7\nALPHA = 1\nBETA = 2\n"), files) == {
        "pkg/b.py": [1, 2], "pkg/other.py": [2]}
    # a turn's cat of two files beside a view: each file's lines are its views
    turn = LoopStep("cat pkg/other.py pkg/b.py\nnl -ba notes.txt", "", actions=(
        LoopStep("cat pkg/other.py pkg/b.py", "ALPHA = 1\nBETA = 2\nALPHA = 1\nGAMMA = 7\n"),
        LoopStep("nl -ba notes.txt", "     1\tfirst note\n")))
    assert viewed_lines(turn, files) == {"pkg/other.py": [1, 2], "pkg/b.py": [2],
                                         "notes.txt": [1]}


def test_a_folded_view_is_read_again_only_when_a_file_it_read_changed(tmp_path, monkeypatch):
    """Every window of a run reads its folded steps' views: one is read once, and again
    only when the tree changed a file it read (each window reads the tree afresh)."""
    from ctxdb.agent import loop

    root = _tree(tmp_path)
    reads = []

    def counted(*args, **kwargs):
        reads.append(args[0].command)
        return viewed_lines(*args, **kwargs)

    monkeypatch.setattr(loop, "viewed_lines", counted)
    step = LoopStep("cat notes.txt", "first note\nsecond note\n", returncode=0)
    workdir = f"/testbed/{tmp_path.name}"  # a step no other test memoized
    first = loop._viewed_lines_once(step, TreeFiles(root), workdir, {})
    again = loop._viewed_lines_once(step, TreeFiles(root), workdir, {})
    assert first == again == {"notes.txt": [1, 2]} and again is not first  # its own copy
    assert len(reads) == 1
    # a line added above: found by its text where it is now
    (root / "notes.txt").write_text("zeroth note\nfirst note\nsecond note\n", encoding="utf-8")
    assert loop._viewed_lines_once(step, TreeFiles(root), workdir, {}) == {"notes.txt": [2, 3]}
    assert len(reads) == 2
    # the file gone: nothing of it is shown
    (root / "notes.txt").unlink()
    assert loop._viewed_lines_once(step, TreeFiles(root), workdir, {}) is None
    # a reader that cannot tell a file's digest reads every time
    plain = TreeFiles(root)
    before = len(reads)
    for _ in range(2):
        loop._viewed_lines_once(step, lambda path: plain(path), workdir, {})
    assert len(reads) == before + 2
    # a step that did more than print files is no view: its output is not even hashed
    keyed = []
    monkeypatch.setattr(loop, "_step_digest", lambda *args: keyed.append(args) or "k")
    ran = LoopStep("python -c 'print(1)'", "1\n" * 50_000, returncode=0)
    assert loop._viewed_lines_once(ran, TreeFiles(root), workdir, {}) is None and not keyed


def test_a_link_loop_in_the_tree_is_no_file(tmp_path):
    """``cat a`` where the tree holds a -> b -> a: the window is built (the output a pointer),
    not ended by the loop (Python raises RuntimeError resolving it)."""
    root = _tree(tmp_path / "tree")
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    files = TreeFiles(root)
    assert files("a") is None and files.digest("a") is None and files.exists("a")
    steps = [LoopStep("cat a", "cat: a: Too many levels of symbolic links\n", returncode=1),
             *_filler(8)]
    window = build_window(steps, TreeFiles(root), RULES)
    assert window.parts[1].rendering == POINTER


def test_a_view_of_an_output_the_harness_cut_shows_only_what_the_agent_saw(tmp_path):
    root = _tree(tmp_path)
    lines = MODULE.splitlines(keepends=True)
    sent = ("<returncode>0</returncode>\n<output_head>\n" + "".join(lines[:6])
            + "</output_head>\n<elided_chars>\n900 characters elided\n</elided_chars>\n"
            + "<output_tail>\n" + "".join(lines[-4:]) + "</output_tail>")
    # 2.x keeps the raw output whole beside the cut one it sent
    cut = LoopStep("cat pkg/mod.py", MODULE, kind=ObservationKind.OUTPUT_CUT, observation=sent)
    view = build_window([cut, *_filler(8)], TreeFiles(root), RULES).parts[1].text
    assert "3\tdef function_2(value):" in view and "80\t    return value + 40" in view
    assert "function_20" not in view, view


def test_consecutive_windows_share_their_prefix_between_folds(tmp_path):
    root = _tree(tmp_path)
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '1,4p'", _nl(1, 4)), *_filler(12)]
    texts = [build_window(steps[:done], TreeFiles(root), RULES).text()
             for done in range(len(steps) + 1)]
    moves = [done for done in range(1, len(steps) + 1)
             if fold_horizon(done, RULES) != fold_horizon(done - 1, RULES)]
    for done in range(1, len(steps) + 1):
        if done not in moves:
            assert texts[done].startswith(texts[done - 1]), done  # appended, nothing changed


def test_a_views_shown_lines_are_those_its_text_shows(store, tmp_path):
    """window_item's shown lines are the lines a view's text shows: a settled view's as
    it first showed them after an edit moved them, none for a pointer."""
    root = _tree(tmp_path)
    steps = [LoopStep("grep -A1 'def function_3(' pkg/mod.py", _lines(5, 6)), *_filler(8)]

    def view_of(context):
        (entry,) = [e for e in context.window if e.item_id == "E2"]
        return entry

    first = view_of(construct_step(store, run_id="loop", instance_id="shown", task="t",
                                   steps=steps, tree=root, rules=RULES))
    assert first.rendering == "view" and first.shown_lines == (5, 6), first
    # two lines inserted above: read afresh the view is at 7-8, the window settles on 5-6
    (root / "pkg" / "mod.py").write_text("# a\n# b\n" + MODULE, encoding="utf-8")
    steps.append(LoopStep("sed -i '1i # a\\n# b' pkg/mod.py", ""))
    settled = view_of(construct_step(store, run_id="loop", instance_id="shown", task="t",
                                     steps=steps, tree=root, rules=RULES))
    assert settled.text == first.text and settled.shown_lines == (5, 6)
    with store.engine.connect() as connection:  # the pool's row says so too
        assert connection.execute(sa.text(
            "SELECT e.start_line, e.end_line FROM evidence_item e JOIN decision d"
            " ON d.decision_id = e.decision_id WHERE d.run_id = 'loop' AND e.item_id = 'E2'"
            " ORDER BY d.decision_id")).all() == [(5, 6), (5, 6)]
    # out of play, a pointer: it shows no lines
    out = view_of(construct_step(store, run_id="out", instance_id="shown", task="t",
                                 steps=steps, tree=root,
                                 rules=dataclasses.replace(RULES, file_in_play_steps=1)))
    assert (out.rendering, out.shown_lines) == ("pointer", None), out
    # the file deleted between folds: read afresh the step would be a pointer, but the
    # window keeps the view it showed, and the store names it as that view
    (root / "pkg" / "mod.py").unlink()
    steps.append(LoopStep("rm pkg/mod.py", ""))
    gone = construct_step(store, run_id="loop", instance_id="shown", task="t", steps=steps,
                          tree=root, rules=RULES)
    assert view_of(gone).text == first.text
    with store.engine.connect() as connection:
        assert connection.execute(sa.text(
            "SELECT kind, path FROM evidence_item WHERE decision_id = :d AND item_id = 'E2'"),
            {"d": gone.decision_id}).one() == ("file_view", "pkg/mod.py")


def test_an_edit_between_folds_leaves_the_views_as_shown_and_notes_the_lines_it_changed(
        store, tmp_path):
    root = _tree(tmp_path)
    mod = root / "pkg" / "mod.py"
    rules = dataclasses.replace(RULES, moved_run_summarized_min=3)
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,8p'", _nl(3, 8)), *_filler(8)]
    assert fold_horizon(len(steps), rules) == fold_horizon(len(steps) + 2, rules) == 4
    windows = [build_window(steps, TreeFiles(root), rules)]
    stored = [construct_step(store, run_id="loop", instance_id="settle", task="t", steps=steps,
                             tree=root, rules=rules)]

    def step(command: str, text: str) -> None:
        mod.write_text(text, encoding="utf-8")
        steps.append(LoopStep(command, ""))
        settled = SettledParts.of(windows[-1], steps[:-1], rules)
        windows.append(build_window(steps, TreeFiles(root), rules, settled=settled))
        stored.append(construct_step(store, run_id="loop", instance_id="settle", task="t",
                                     steps=steps, tree=root, rules=rules))

    # one line replaced and two inserted above the rest of the view
    edited = MODULE.replace("return value + 3", "return value - 3").replace(
        "def function_2(", "# a\n# b\ndef function_2(")
    step("sed -i edit pkg/mod.py", edited)
    before, after = windows[-2].text(), windows[-1].text()
    appended_at = after.rindex("[step 10]")
    assert after.startswith(before) and appended_at == len(before)  # only appended
    note = after[appended_at:]
    assert note.endswith(
        f"[E{tree_change_item(10)} step 10's command changed lines the views above show]\n"
        "[E2 pkg/mod.py, as it reads now]\n[lines 5-7 now read what lines 3-5 read]\n"
        "8\t    return value - 3\n9\tdef function_4(value):\n10\t    return value + 4\n\n"), note
    # the store files the note under the file whose lines it shows, as it does a view
    with store.engine.connect() as connection:
        assert connection.execute(sa.text(
            "SELECT kind, path, entity_key FROM evidence_item WHERE decision_id = :d"
            " AND item_id = :i"), {"d": stored[-1].decision_id,
                                   "i": f"E{tree_change_item(10)}"}).one() == (
            "file_view", "pkg/mod.py", "pkg/mod.py")
    # a run shorter than the rule's minimum is shown at its new numbers, and what the lines
    # it left now read
    literal = build_window(steps[:10], TreeFiles(root), dataclasses.replace(
        rules, moved_run_summarized_min=6), settled=SettledParts.of(windows[0], steps[:9], rules))
    assert literal.text().endswith("[E2 pkg/mod.py, as it reads now]\n3\t# a\n4\t# b\n"
                                   "5\tdef function_2(value):\n6\t    return value + 2\n"
                                   "7\tdef function_3(value):\n8\t    return value - 3\n"
                                   "9\tdef function_4(value):\n10\t    return value + 4\n\n")
    # the file put back: the note of the step that did it says so
    step("git checkout pkg/mod.py", MODULE)
    assert windows[-1].text().startswith(after)
    assert windows[-1].text().endswith("[E2 pkg/mod.py, as it reads now]\n"
                                       "[lines 3-5 now read what lines 5-7 read]\n"
                                       "6\t    return value + 3\n"
                                       "7\tdef function_4(value):\n8\t    return value + 4\n"
                                       "9\tdef function_5(value):\n10\t    return value + 5\n\n")
    # under a tight ceiling the ladder keeps the newest output, not the note after it
    tight = plan_window(copy.deepcopy(windows[1]), store.settings.tokenizer, 150, "t", [],
                        run_ref("loop", "settle"))
    newest = newest_output(tight.window.parts)
    assert newest is not None and newest.step == 10 and newest.rendering != POINTER
    assert tight.total_tokens <= 150
    # the store's windows settle alike: the same texts from the recorded decisions
    assert [_window_body(store, c) for c in stored] == [w.text() for w in windows]
    # the fold horizon moves: views read afresh, the notes gone
    mod.write_text(edited, encoding="utf-8")
    steps.extend(_filler(2))
    folded = build_window(steps, TreeFiles(root), rules,
                          settled=SettledParts.of(windows[-1], steps[:-2], rules))
    assert fold_horizon(len(steps), rules) == 8
    assert "changed lines the views" not in folded.text()
    # the lines it printed where they are now: two lines down, the changed one among them
    assert "[E2 pkg/mod.py lines 5-10, as the tree holds them now]\n5\tdef function_2(value):" \
        in folded.text() and "8\t    return value - 3" in folded.text()
    # without the rule, the view is re-read at every step (the middle of the window moves)
    unsettled = build_window(steps[:10], TreeFiles(root), rules.without("settled"),
                             settled=SettledParts.of(windows[0], steps[:9], rules))
    assert "8\t    return value - 3" in unsettled.text()
    assert "changed lines the views" not in unsettled.text()


def test_a_note_of_changed_lines_leaves_no_line_believed_wrong():
    # a view without its blank lines (a cat located by text), a line inserted far above:
    # one run, not each line at its old number
    text = [f"line_{n} = {n}" if n % 4 else "" for n in range(1, 201)]
    was = {n: text[n - 1] for n in range(120, 181) if text[n - 1]}
    assert _file_changes(was, ["import logging", *text], 10) == [
        f"[lines {min(was) + 1}-{max(was) + 1} now read what lines {min(was)}-{max(was)} read]"]
    # a line the edit inserted inside the view is in the note
    inserted = [*text[:149], "inserted = True", *text[149:]]
    assert "150\tinserted = True" in _file_changes(was, inserted, 10)
    # a line an edit changed whose text also stands far away: the note stays short
    far = [f"line_{n}" for n in range(1, 1001)]
    far[14] = far[499] = "    return None"
    view_of = {n: far[n - 1] for n in range(5, 26)}
    edited = [*far[:9], "one line instead", *far[20:]]
    assert len(_file_changes(view_of, edited, 10)) <= len(view_of)
    # a sparse view (grep hits far apart) whose lines between two found ones changed: each
    # as it reads now, not the stretch between them
    hits = [f"filler_{n}" for n in range(1, 2001)]
    sparse = {n: f"def hit_{n}():" for n in (10, 500, 1000, 1500)}
    for n, line in sparse.items():
        hits[n - 1] = line
    hits[499], hits[999] = "def renamed_500():", "def renamed_1000():"
    hits[1400:1400] = ["added = 1"] * 3
    note = _file_changes(sparse, hits, 10)
    assert "500\tdef renamed_500():" in note and len(note) <= len(sparse) + 1, note
    # whatever the edits, a reader of the note holds no line wrong
    rng = random.Random(7)
    for _ in range(300):
        before = [f"v{rng.randrange(12)}" if rng.random() < 0.8 else "" for _ in range(40)]
        start = rng.randrange(1, 30)
        was = {n: before[n - 1] for n in range(start, start + rng.randrange(1, 12))
               if rng.random() < 0.8}
        after = list(before)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(after) + 1)
            edit = rng.choice(("insert", "delete", "replace"))
            if edit == "insert":
                after[at:at] = [f"new{rng.randrange(5)}"] * rng.randrange(1, 15)
            elif after and at < len(after):
                after[at:at + rng.randrange(1, 6)] = (
                    [] if edit == "delete" else [f"x{rng.randrange(5)}"])
        held = _read_note(was, _file_changes(was, after, rng.choice((1, 3, 10))))
        assert all(n <= len(after) and after[n - 1] == line for n, line in held.items()), (
            was, after, held)


def test_what_the_window_says_of_a_file_is_held_against_the_tree_between_folds(tmp_path):
    root = _tree(tmp_path)
    mod = root / "pkg" / "mod.py"
    rules = dataclasses.replace(RULES, moved_run_summarized_min=3)
    # a view without numbers: its lines were found by their text
    steps = [LoopStep("sed -n '3,8p' pkg/mod.py", _lines(3, 8)), *_filler(8)]
    first = build_window(steps, TreeFiles(root), rules)
    note = f"[E{tree_change_item(10)} step 10's command changed lines the views above show]\n"

    def next_window(previous, history, command="sed -i edit pkg/mod.py") -> str:
        later = [*history, LoopStep(command, "")]
        return build_window(later, TreeFiles(root), rules,
                            settled=SettledParts.of(previous, history, rules)).text()

    def write(text: str) -> None:
        mod.write_text(text, encoding="utf-8")

    # a line edited in place no longer matches the view's text: still said
    write(MODULE.replace("return value + 3", "return value - 3"))
    assert next_window(first, steps).endswith(
        note + "[E2 pkg/mod.py, as it reads now]\n6\t    return value - 3\n\n")
    # a file cut short: the lines past its end are named; a file gone, said
    write("".join(MODULE.splitlines(keepends=True)[:6]))
    assert next_window(first, steps).endswith(
        note + "[E2 pkg/mod.py, as it reads now]\n[lines 7-8: past the file's end now]\n\n")
    mod.unlink()
    assert next_window(first, steps).endswith(note + f"[E2 pkg/mod.py, {DELETED}]\n\n")
    # there but no longer readable as text (now binary): read it again
    mod.write_bytes(b"\x00binary")
    assert next_window(first, steps).endswith(note + f"[E2 pkg/mod.py, {GONE}]\n\n")

    # the ladder showed the view as a pointer: the notes naming it are still held to the tree
    write(MODULE.replace("return value + 3", "return value - 3"))
    edited = [*steps, LoopStep("sed -i edit pkg/mod.py", "")]
    with_note = build_window(edited, TreeFiles(root), rules,
                             settled=SettledParts.of(first, steps, rules))
    view = next(part for part in with_note.parts if part.item_no == 2)
    view.text, view.rendering = "[E2 file view masked: 6 lines]\n\n", POINTER
    write(MODULE.replace("return value + 3", "return value * 3"))
    again = f"[E{tree_change_item(11)} step 11's command changed lines the views above show]\n"
    corrected = again + "[E2 pkg/mod.py, as it reads now]\n6\t    return value * 3\n\n"
    text = next_window(with_note, edited, "sed -i again pkg/mod.py")
    assert "[E2 file view masked: 6 lines]" in text and text.endswith(corrected)
    # the view evicted from that window comes back read afresh; the note after it corrected
    with_note.parts.remove(view)
    text = next_window(with_note, edited, "sed -i again pkg/mod.py")
    assert "[E2 pkg/mod.py lines 3-8, as the tree holds them now]" in text
    assert text.endswith(corrected)
    # another history under the same run (one command differs): nothing settles on it
    other = [*steps[:3], LoopStep("python -c 'print(99)'", steps[3].output), *steps[4:]]
    text = build_window([*other, LoopStep("sed -i again pkg/mod.py", "")], TreeFiles(root),
                        rules, settled=SettledParts.of(first, steps, rules)).text()
    assert "changed lines the views" not in text
    assert "[E2 pkg/mod.py lines 3-8, as the tree holds them now]" in text  # read afresh


def _window_body(store, context) -> str:
    """The loop window's parts as the store holds them (the header and task left out)."""
    with store.engine.connect() as connection:
        texts = [row[0] for row in connection.exec_driver_sql(
            "SELECT rendered_text FROM v_window_item WHERE decision_id = ? ORDER BY position",
            (context.decision_id,))]
    head = MASK_HINT.format(ref=run_ref("loop", "settle")) + "\n\n"
    return "".join(texts).removeprefix(head)


def test_a_fresh_output_elides_what_an_earlier_fresh_output_shows(tmp_path):
    report = "".join(f"tests/test_mod.py::test_{n} PASSED\n" for n in range(6))
    status = "<returncode>1</returncode>\n"  # the harness's first line: never elided
    steps = [LoopStep("pytest -v tests", status + report + "1 failed"),
             LoopStep("pytest -v tests", status + report + "all passed")]
    window = build_window(steps, TreeFiles(_tree(tmp_path)), RULES)
    newest = window.parts[-1]
    assert newest.rendering == SHOWN_CUT
    assert newest.text == f"{status}[… 6 lines as in the output of step 1 …]\nall passed\n\n"
    whole = build_window(steps, TreeFiles(tmp_path), RULES.without("repeats"))
    assert whole.parts[-1].rendering == SHOWN_WHOLE
    # lines the earlier output shows, but not in that order, are no run of it
    shuffled = [LoopStep("pytest -v tests", status + report + "1 failed"),
                LoopStep("pytest -v tests", "".join(report.splitlines(True)[::-1]))]
    assert build_window(shuffled, TreeFiles(tmp_path), RULES).parts[-1].rendering \
        == SHOWN_WHOLE
    # a run whose note would be no shorter stays (a harness's markup around an empty output)
    markup = "<returncode>0</returncode>\n<output>\n</output>\n"
    quiet = [LoopStep("sed -i 's/a/b/' pkg/mod.py", markup),
             LoopStep("sed -i 's/b/c/' pkg/mod.py", markup)]
    assert build_window(quiet, TreeFiles(tmp_path), RULES).parts[-1].text == markup + "\n"


def test_the_decision_type_comes_from_the_history():
    read = LoopStep("cat pkg/mod.py", "x")
    edit = LoopStep("sed -i 's/a/b/' pkg/mod.py", "")
    failing = LoopStep("python -m pytest tests", "1 failed", returncode=1)
    assert decision_type_of([]) == decision_type_of([read]) == "localize"
    assert decision_type_of([read, edit]) == "edit"
    assert decision_type_of([read, edit, failing]) == "repair"
    # a harness running the agent elsewhere than /testbed: its paths are the repository's
    home = "/home/u/repo"
    for edit_there in (f"sed -i 's/a/b/' {home}/pkg/mod.py",
                       f"cd {home} && sed -i 's/a/b/' pkg/mod.py",
                       f"cd {home}/pkg && sed -i 's/a/b/' mod.py"):
        assert decision_type_of([read, LoopStep(edit_there, ""), failing], home) == "repair"
        assert decision_type_of([read, LoopStep(edit_there, "")]) == "localize", edit_there
    assert decision_type_of([LoopStep(f"sed -i 's/a/b/' {home}2/pkg/mod.py", "")],
                            home) == "localize"  # another directory whose name starts so


@pytest.fixture
def store(tmp_path):
    with ContextStore.open(tmp_path / "loop.db") as opened:
        yield opened


PREFIX = [{"role": "system", "content": "You are a bash agent. Reply with one command."},
          {"role": "user", "content": "Fix it.\n<task>function_3 subtracts</task>"}]


def test_a_step_is_recorded_with_the_harness_prompt_first_and_the_task_once(store, tmp_path,
                                                                             capsys):
    root = _tree(tmp_path / "tree")
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)),
             LoopStep("true", ""),  # an empty output is a step like any other
             *_filler(6)]
    context = construct_step(store, run_id="loop", instance_id="demo", task="function_3 subtracts",
                             steps=steps, tree=root, prefix=PREFIX, rules=RULES)
    messages = context.messages(prefix=PREFIX)
    assert messages[:2] == PREFIX and len(messages) == 3
    assert messages[2]["content"].count("function_3 subtracts") == 0
    assert messages[2]["content"] == store.show(context.decision_id)
    assert "task_in_prefix" in context.flags
    with store.engine.connect() as connection:
        kinds = dict(connection.exec_driver_sql(
            "SELECT item_id, kind FROM evidence_item WHERE decision_id = ?",
            (context.decision_id,)).all())
    assert kinds["E1"] == "agent_turn" and kinds["E2"] == "file_view"
    empty_output = f"E{item_numbers(2)[1]}"
    assert kinds[empty_output] in ("harness_note", "tool_output")
    assert store.verify() == {}
    # a masked part is one `ctxdb show` away, by the name the window prints
    assert run_ref("loop", "demo") in messages[2]["content"]
    assert "python -c 'print(0)'" in store.show(run_ref("loop", "demo"),
                                                f"E{item_numbers(3)[0]}")
    # an instance id a shell would split: the window's line runs as printed
    odd_id = "issue 12 (retry)"
    shown = construct_step(store, run_id="loop", instance_id=odd_id, task="function_3 subtracts",
                           steps=steps, tree=root, prefix=PREFIX, rules=RULES)
    hint = shlex.split(shown.messages(prefix=PREFIX)[2]["content"].splitlines()[0])
    assert hint[:4] == ["ctxdb", "show", run_ref("loop", odd_id), "E<n>"]
    assert "python -c 'print(0)'" in store.show(hint[2], f"E{item_numbers(3)[0]}")
    # the run alone, no instance: the error names the run's instances
    with pytest.raises(LookupError, match=r"run:loop: expected run:RUN_ID:INSTANCE_ID, the "
                       r"instance after the run \(this run's: 'demo', 'issue 12 \(retry\)'\)"):
        store.show("run:loop")
    # a run the store lacks, or an instance its run lacks: the nearest names, if any
    for ref, said in (
            ("run:nope:demo", r"run:nope:demo: no run of that name \(this store's runs: "
                              r"'loop'; expected run:RUN_ID:INSTANCE_ID\)"),
            ("run:lop:demo", r"run:lop:demo: no run of that name \(the nearest: 'loop'; "),
            ("run:loop:dem", r"run:loop:dem: run 'loop' has no decision of instance 'dem' "
                             r"\(the nearest: 'demo'\)"),
            ("run:loop:zzz", r"run 'loop' has no decision of instance 'zzz' \(its instances: "
                             r"'demo', 'issue 12 \(retry\)'\)"),
            ("req-cb58", r"req-<hex> \(at least 8 hex digits\)")):
        with pytest.raises(LookupError, match=said):
            store.show(ref)
    # ctxdb why on a loop part: its size (a part is rendered once, from nothing before)
    from ctxdb.cli import main

    assert main(["why", str(context.decision_id), "E1", "--db", str(store.url)]) == 0
    why = capsys.readouterr().out
    assert "tokens]" in why and "None" not in why, why
    # read back, the decision's messages are the ones sent: the harness's prompt first
    assert store.context(context.decision_id).messages() == messages == context.messages()
    # a prompt with a lone surrogate and a NUL reads back as the decision stored it
    odd = [{"role": "system", "content": "bad \udc80 byte, \x00 nul"}, PREFIX[1]]
    stored = construct_step(store, run_id="loop", instance_id="odd", task="function_3 subtracts",
                            steps=steps, tree=root, prefix=odd, rules=RULES)
    assert "text_replaced" in stored.flags
    assert store.context(stored.decision_id).messages() == stored.messages()
    content = stored.messages()[0]["content"]
    # one U+FFFD for each undecodable byte (not one for each of the surrogate's UTF-8 bytes)
    assert "\udc80" not in content and "bad \ufffd byte, \u2400 nul" in content
    # the prompt as given reads as the one counted (and is sent as given); another (none,
    # too) is refused
    assert stored.messages(prefix=odd) == [*odd, stored.messages()[len(odd)]]
    for other in ([], [PREFIX[0]], [{"role": "system", "content": "word " * 40_000}]):
        with pytest.raises(RequestError, match=rf"^prefix: expected the 2 harness messages "
                           rf"decision {stored.decision_id} was built after and counted with "
                           rf"\(or none: they are the default\), got {len(other)} messages"):
            stored.messages(prefix=other)
    # the first step: the harness's prompt alone
    first = construct_step(store, run_id="loop", instance_id="demo", task="function_3 subtracts",
                           steps=[], tree=root, prefix=PREFIX, rules=RULES)
    assert first.messages(prefix=PREFIX) == PREFIX == store.context(first.decision_id).messages()


def test_the_ceiling_holds_with_the_harness_prompt_counted(tmp_path):
    import dataclasses

    from ctxdb.config import load_settings

    root = _tree(tmp_path / "tree")
    settings = dataclasses.replace(load_settings(), token_ceiling=400)
    steps = [LoopStep(f"python run_{n}.py", "".join(f"output line {n}.{i}\n" for i in range(25)))
             for n in range(6)]
    with ContextStore.open(tmp_path / "tight.db", settings=settings) as store:
        context = construct_step(store, run_id="tight", instance_id="demo", task="t",
                                 steps=steps, tree=root, prefix=PREFIX, rules=RULES)
        assert context.token_count <= 400
        assert [s.ladder_step for s in context.budget_log][:1] == ["loop_fold_fresh"]
        assert "output line" in context.window[-1].text  # the newest keeps its end


def test_one_huge_output_is_cut_before_the_steps_before_it_leave(tmp_path):
    """Over the ceiling, a newest output of more than half of it is cut to what fits of
    its end (in half, or in the room the rest leaves when that is more), before the
    agent's earlier steps fold or leave the window: only as much goes as must."""
    import dataclasses

    from ctxdb.config import load_settings

    ceiling = 3000
    settings = dataclasses.replace(load_settings(), token_ceiling=ceiling)
    steps = [*(LoopStep(f"python run_{n}.py", f"result {n}\n") for n in range(6)),
             LoopStep("python noisy.py", "".join(f"log line {i}\n" for i in range(30_000)))]
    with ContextStore.open(tmp_path / "huge.db", settings=settings) as store:
        context = construct_step(store, run_id="huge", instance_id="demo", task="t",
                                 steps=steps, tree=_tree(tmp_path / "tree"), prefix=PREFIX,
                                 rules=RULES)
    assert context.token_count <= ceiling
    assert [s.ladder_step for s in context.budget_log] == ["loop_cut_newest_to_share"]
    assert context.verdicts.get("evicted", 0) == 0
    text = context.render()
    assert all(f"$ python run_{n}.py" in text and f"result {n}" in text for n in range(6))
    newest = context.window[-1]
    assert newest.text.startswith(f"[E{item_numbers(7)[1]} cut to its last ")
    assert "of 30000 lines: over the ceiling]" in newest.text
    assert "log line 29999" in newest.text
    assert newest.token_count > ceiling // 2  # the room the short steps leave
    assert context.token_count > ceiling * 0.95


def test_a_newest_output_of_one_giant_line_keeps_the_end_of_it(tmp_path):
    """Cut to what fits of its end, a newest output whose one line is longer than the
    room keeps that line's end with the short lines after it (its closing markup), not
    the short lines alone — a line just under the room too, which fits alone but not
    beside them."""
    import dataclasses

    from ctxdb.config import load_settings

    ceiling = 3000
    settings = dataclasses.replace(load_settings(), token_ceiling=ceiling)
    giant = "".join(f"{n:06d}," for n in range(60_000))
    steps = [LoopStep("python dump.py", giant,
                      observation=f"<returncode>0</returncode>\n<output>\n{giant}\n</output>")]
    with ContextStore.open(tmp_path / "giant.db", settings=settings) as store:
        context = construct_step(store, run_id="giant", instance_id="demo", task="t",
                                 steps=steps, tree=_tree(tmp_path / "tree"), prefix=PREFIX,
                                 rules=RULES)
    newest = context.window[-1]
    assert newest.text.startswith(f"[E{item_numbers(1)[1]} cut to the end of line 3 and its "
                                  "last 1 of 4 lines: over the ceiling]\n")
    assert newest.text.endswith("059998,059999,\n</output>\n\n")
    assert newest.token_count > ceiling // 2 and context.token_count <= ceiling
    from ctxdb.agent.adapter import _tail_that_fits
    from ctxdb.tokens import get_counter

    def _count_tokens(text: str) -> int:
        return get_counter("cl100k_base").count(text)

    room = 300
    line = "".join(f"{n:06d}," for n in range(1000))
    while _count_tokens(line) > room - 5:  # just under the room: it fits alone, not
        line = line[7:]                      # beside the note and </output>
    cut = _tail_that_fits(f"<output>\n{line}\n</output>", 2, room, "cl100k_base")
    assert cut.startswith("[E2 cut to the end of line 2 and its last 1 of 3 lines")
    assert cut.endswith(f"{line[-50:]}\n</output>\n\n") and _count_tokens(cut) <= room


def test_no_rung_of_the_ladder_makes_the_window_bigger(tmp_path):
    """A command just over the cut's length, cut with its note, or folded to a pointer
    no shorter than itself, is left as it was: every logged rung shrinks the window."""
    import dataclasses

    from ctxdb.agent.adapter import CUT_COMMAND_CHARS
    from ctxdb.config import load_settings

    steps = [LoopStep("echo " + f"{n}" * (CUT_COMMAND_CHARS - 3), f"{n}\n") for n in range(9)]
    steps += [LoopStep("python noisy.py", "".join(f"log {i}\n" for i in range(400)))]
    for ceiling in (256, 400, 600, 800):
        settings = dataclasses.replace(load_settings(), token_ceiling=ceiling)
        with ContextStore.open(tmp_path / f"{ceiling}.db", settings=settings) as store:
            context = construct_step(store, run_id="r", instance_id="demo", task="t",
                                     steps=steps, tree=_tree(tmp_path / f"tree{ceiling}"),
                                     prefix=PREFIX, rules=RULES)
        assert context.budget_log, ceiling
        assert all(rung.tokens_after < rung.tokens_before for rung in context.budget_log), [
            (rung.ladder_step, rung.item_id, rung.tokens_before, rung.tokens_after)
            for rung in context.budget_log]


def test_the_ladder_words_a_pointer_as_the_fold_does(tmp_path):
    import dataclasses

    from ctxdb.config import load_settings

    # mini-swe-agent wraps even an empty output in markup: the ladder's pointer reads the
    # output, not the markup ("masked: 3 lines" of nothing), as a fold's pointer does
    markup = "<returncode>0</returncode>\n<output>\n{}</output>"
    steps = [LoopStep("touch a", "", observation=markup.format("")),
             *(LoopStep(f"python run_{n}.py", "".join(f"output line {n}.{i}\n" for i in range(60)),
                        observation=markup.format("".join(f"output line {n}.{i}\n"
                                                          for i in range(60))))
               for n in range(3))]
    settings = dataclasses.replace(load_settings(), token_ceiling=700)
    with ContextStore.open(tmp_path / "tight.db", settings=settings) as store:
        context = construct_step(store, run_id="tight", instance_id="demo", task="t",
                                 steps=steps, tree=_tree(tmp_path / "tree"), prefix=PREFIX,
                                 # (the empty output folded first)
                                 rules=RULES.without("largest_first"))
        assert context.budget_log, "the window should need the ladder"
        text = context.render()
        assert f"[E{item_numbers(1)[1]} tool output: no output]" in text, text
        assert f"[E{item_numbers(2)[1]} tool output masked: 60 lines]" in text, text
        assert "masked: 3 lines" not in text and "masked: 63 lines" not in text


def test_the_ladder_keeps_what_a_mixed_turn_and_a_call_said(tmp_path):
    """Folded by the ceiling's ladder, a turn that read a file beside a failing test run
    still says the run failed, and a tool call is not shown as a shell command."""
    import dataclasses

    from ctxdb.config import load_settings

    root = _tree(tmp_path / "tree")
    grep = "grep -n 'def ' pkg/mod.py"
    printed = "".join(f"{2 * n - 1}:def function_{n}(value):\n" for n in range(1, 41))
    failed = "F\n1 failed in 0.1s\n"
    mixed = LoopStep(f"{grep}\npython -m pytest -q", printed + failed, actions=(
        LoopStep(grep, printed, returncode=0),
        LoopStep("python -m pytest -q", failed, returncode=1)))
    call = 'editor {"command": "view", "path": "pkg/other.py"}'
    steps = [mixed, LoopStep("cat -n pkg/other.py", _nl(1, 2, "ALPHA = 1\nBETA = 2\n"),
                             call=call),
             *(LoopStep(f"python run_{n}.py " + " ".join(f"--flag-{k}" for k in range(12)),
                        "".join(f"output line {n}.{i}\n" for i in range(10))) for n in range(8))]
    # (the oldest commands folded, none evicted: long commands leave a margin)
    settings = dataclasses.replace(load_settings(), token_ceiling=500)
    with ContextStore.open(tmp_path / "tight.db", settings=settings) as store:
        context = construct_step(store, run_id="tight", instance_id="demo", task="t",
                                 steps=steps, tree=root, prefix=PREFIX, rules=RULES)
    ladder = [s.ladder_step for s in context.budget_log]
    assert "loop_fold_view" in ladder and "loop_fold_command" in ladder, ladder
    assert "loop_evict_oldest" not in ladder, ladder
    text = context.render()
    assert (f"[E{item_numbers(1)[1]} file view masked: 40 lines; also ran "
            "`python -m pytest -q`: test output masked: 2 lines; exit 1]") in text, text
    assert f"[step 2] … [E{item_numbers(2)[0]}]\n" in text, text


def test_what_the_ladder_folded_stays_folded_while_over_the_ceiling(tmp_path):
    """Near the ceiling the ladder folds fresh outputs, then a view; at the next step the
    view stays folded (settled), so fewer fresh outputs need folding — and without
    *sticky ladder* those come back, changing the window where the cache held it (GPT-5's
    sphinx-9229 showed and folded its step-22 output by turns). With the rule the next
    window goes on as the one before it did."""
    from ctxdb.config import load_settings

    root = _tree(tmp_path)
    tokenizer = load_settings().tokenizer

    def printed(n: int, lines: int) -> str:
        return "".join(f"result {n} line {i} of the run\n" for i in range(lines))

    steps = [LoopStep("cat pkg/mod.py", MODULE), *_filler(3),
             *(LoopStep(f"python step_{n}.py", printed(n, 12)) for n in (5, 6, 7)),
             LoopStep("python big.py", printed(8, 40)), LoopStep("python small.py", printed(9, 5))]

    def windows(ceiling: int, rules: LoopRules) -> list[tuple[set[int], str]]:
        settled, built = None, []
        for done in (8, 9):
            window = build_window(steps[:done], TreeFiles(root), rules, str(root), settled)
            plan = plan_window(window, tokenizer, ceiling, "t", PREFIX, run_ref="run:r:i")
            assert plan.total_tokens <= ceiling
            built.append((set(window.ladder_folded), window.text()))
            settled = SettledParts.of(window, steps[:done], rules)
        return built

    view, fresh = item_numbers(1)[1], {item_numbers(n)[1] for n in (5, 6, 7)}
    # (in either order of the ladder's folds: the oldest first, as when GPT-5's case was
    # found, or the largest first)
    unfolded = {order: 0 for order in ("largest", "oldest")}
    for order, rules in (("largest", RULES), ("oldest", RULES.without("largest_first"))):
        for ceiling in range(600, 1200, 20):
            (folded, text), (next_folded, next_text) = windows(ceiling, rules)
            (off_folded, off_text), (off_next, off_next_text) = windows(
                ceiling, rules.without("sticky_ladder"))
            assert (folded, text) == (off_folded, off_text)  # the first: no window before
            # (a next window under the ceiling as built needs no ladder: nothing is folded)
            if not (view in folded and fresh <= folded) or not off_next or off_next >= fresh:
                continue
            unfolded[order] += 1  # without the rule a fresh output it folded comes back...
            # (up to step 8, the previous window's newest step, which that window's ladder
            # could not fold, only cut, and the next may fold: largest first, it does)
            before_newest = text[:text.index("[step 8]")]
            assert not off_next_text.startswith(before_newest), (order, ceiling)
            # ...with it, every one stays folded and the window goes on as the one before
            # it (the view stays folded as it was shown: settled)
            assert fresh <= next_folded, (order, ceiling)
            assert next_text.startswith(before_newest), (order, ceiling)
            if order == "oldest" and next_text.startswith(text):
                last = ceiling
    assert all(unfolded.values()), unfolded
    # the same through the store: the next decision reads what the ladder folded back
    # from the previous one's budget_log, and says so
    # and the same windows as a replay builds them in memory (its rule-off arms), across
    # a fold: both remember exactly the ladder's folds
    longer = [*steps, *(LoopStep(f"python more_{n}.py", printed(10 + n, 12)) for n in range(4))]
    settings = dataclasses.replace(load_settings(), token_ceiling=last)
    fits = window_fits(tokenizer, last, "t", PREFIX, run_ref("sticky", "demo"))
    settled = None
    with ContextStore.open(tmp_path / "sticky.db", settings=settings) as store:
        for done in range(8, len(longer) + 1):
            stored = construct_step(store, run_id="sticky", instance_id="demo", task="t",
                                    steps=longer[:done], tree=root, prefix=PREFIX,
                                    seq=done + 1, rules=RULES)
            window = build_window(longer[:done], TreeFiles(root), RULES, str(root), settled,
                                  prompt_names(PREFIX, "t"), fits)
            plan = plan_window(window, tokenizer, last, "t", PREFIX,
                               run_ref=run_ref("sticky", "demo"))
            settled = SettledParts.of(window, longer[:done], RULES)
            assert stored.messages(prefix=PREFIX)[-1]["content"] == plan.text("t"), done
            if done == 9:
                again = [s.item_id for s in stored.budget_log
                         if s.detail == LADDER_FOLDED_BEFORE]
                assert {f"E{n}" for n in fresh} <= set(again), stored.budget_log
                # and `ctxdb show` says why each rung took its item
                with store.engine.connect() as connection:
                    shown = forensics.summary(connection, stored.decision_id)
                assert f"E{min(fresh)}" in shown and f"({LADDER_FOLDED_BEFORE})" in shown, shown
                # and `ctxdb why` of a part the ladder folded names the rung, the reason
                # and the part's size before it
                step = next(s for s in stored.budget_log if s.item_id == f"E{min(fresh)}")
                (render,) = [row for row in store.why(stored.decision_id, step.item_id)
                             if row["stage"] == "render"]
                assert re.search(rf"(^|; )the ceiling's ladder, step {step.step_no} "
                                 rf"\({step.ladder_step}, {LADDER_FOLDED_BEFORE}, \d+ tokens "
                                 r"before\)(;|$)", render["detail"]), render


def test_the_ladder_folds_with_a_part_what_is_true_only_beside_it(tmp_path):
    """From a cold review: over the ceiling, the ladder folded a view while a later view
    of its file still said its lines were "shown above", a note of changed lines while the
    view it corrects still showed the old lines as the tree's, and an output whose lines
    the newest output left out as repeated. Now what leans on a part folds with it, and an
    output a shown one repeats stays."""
    from ctxdb.agent.loop import leaning_on, repeated_steps

    def part(item_no, text, step=1, omitted=()):
        return LoopPart(item_no, step, FILE_VIEW, text, text, SHOWN_LINES, "folded file view",
                        omitted=omitted)

    first = part(2, "[E2 pkg/mod.py lines 1-3, as the tree holds them now]\n1\ta\n2\tb\n")
    later = part(10, "[E10 pkg/mod.py: the lines it showed are shown above]\n", step=3,
                 omitted=(("pkg/mod.py", frozenset({1, 2})),))
    # a view of other lines of the file leans on nothing (it stays when the first folds)
    apart = part(12, "[E12 pkg/mod.py lines 70-71, as the tree holds them now]\n70\tx\n",
                 step=3, omitted=(("pkg/mod.py", frozenset({3})),))
    other = part(14, "[E14 notes.txt line 1, as the tree holds them now]\n1\tfirst\n", 4)
    note = part(20, "[E2 pkg/mod.py, as it reads now]\n2\tB\n", step=5)
    parts = [first, later, apart, other, note]
    assert leaning_on(first, parts) == [later]
    assert leaning_on(later, parts) == [] and leaning_on(other, parts) == []
    assert leaning_on(note, parts) == [first, later]
    repeat = LoopPart(30, 6, OUTPUT_PART, "x", "[… 12 lines as in the output of step 1 …]\n",
                      SHOWN_CUT, "fresh, lines an earlier output shows elided")
    assert repeated_steps([*parts, repeat]) == {1}
    assert repeated_steps([dataclasses.replace(repeat, rendering=POINTER)]) == set()
    # an output a fresh one repeats waits until that one is folded, then folds: not
    # kept for nothing while the ladder goes on to fold commands and evict steps
    from ctxdb.config import load_settings

    tokenizer = load_settings().tokenizer
    passed = "".join(f"tests/test_mod.py::test_case_{n} PASSED some words {n}\n"
                     for n in range(60))
    runs = [LoopStep("python -m pytest tests -v", passed + "FAILED x\n", returncode=1),
            LoopStep("python -m pytest tests -v -k y", passed + "FAILED y\n", returncode=1),
            LoopStep("python -c 'print(1)'", "1\n")]
    tree = _tree(tmp_path / "runs")
    whole = plan_window(build_window(runs, TreeFiles(tree), RULES, str(tree)), tokenizer,
                        None, "t", PREFIX, run_ref="run:r:i").total_tokens
    plan = plan_window(build_window(runs, TreeFiles(tree), RULES, str(tree)), tokenizer,
                       whole - 40, "t", PREFIX, run_ref="run:r:i")
    assert [rung.ladder_step for rung in plan.budget_steps] == ["loop_fold_fresh"] * 2
    assert not plan.evicted and all(p.rendering != POINTER for p in plan.window.parts
                                    if p.kind == AGENT_TURN)
    # ...but one the previous window's ladder folded does not wait: the window goes on as
    # that one did (a run of GPT-5-mini's re-sent its window uncached for four steps)
    from ctxdb.agent.adapter import LADDER_FOLDED_BEFORE

    big = LoopStep("python big.py", "".join(f"big line {n} of the run\n" for n in range(90)))
    window = build_window([*runs[:2], big, runs[2]], TreeFiles(tree), RULES, str(tree))
    repeated = next(p for p in window.parts if p.step == 1 and p.kind != AGENT_TURN)
    assert repeated_steps(window.parts) == {1}
    window.ladder_folded_before = frozenset({repeated.item_no})
    whole = plan_window(copy.deepcopy(window), tokenizer, None, "t", PREFIX,
                        run_ref="run:r:i").total_tokens
    plan = plan_window(window, tokenizer, whole - 40, "t", PREFIX, run_ref="run:r:i")
    assert (plan.budget_steps[0].item_id, plan.budget_steps[0].detail) == (
        f"E{repeated.item_no}", LADDER_FOLDED_BEFORE), plan.budget_steps
    # in the ladder: two views of one file, the later one leaving out what the first
    # shows; folded, the first takes the later one with it
    root = _tree(tmp_path)
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '1,40p'", _nl(1, 40)),
             LoopStep("nl -ba pkg/mod.py | sed -n '30,45p'", _nl(30, 45)), *_filler(8)]
    window = build_window(steps, TreeFiles(root), RULES, str(root))
    views = [p for p in window.parts if p.rendering == SHOWN_LINES]
    assert len(views) == 2 and "lines 41-45" in views[1].text, views[1].text
    whole = plan_window(window, tokenizer, None, "t", PREFIX, run_ref="run:r:i").total_tokens
    plan = plan_window(build_window(steps, TreeFiles(root), RULES, str(root)), tokenizer,
                       whole - 40, "t", PREFIX, run_ref="run:r:i")
    folded = [(rung.item_id, rung.detail) for rung in plan.budget_steps]
    assert folded == [(f"E{views[0].item_no}", LADDER_LARGEST_FIRST),
                      (f"E{views[1].item_no}", f"with E{views[0].item_no}")], folded


def test_over_the_ceiling_the_largest_output_folds_first(tmp_path):
    """One long output (a 521-line ``grep -R``) puts the window over the ceiling: the
    ladder folds it, and the short outputs the agent reads from stay — oldest first, it
    folded those before reaching the long one (GPT-5-mini's sympy-22456 then replaced a
    line only a folded 81-line ``nl -ba … | sed -n`` had shown). Among outputs of one size
    the oldest still goes first; views, after the outputs, the largest first too."""
    from ctxdb.config import load_settings

    root = _tree(tmp_path)
    tokenizer = load_settings().tokenizer
    grep = "".join(f"pkg/x_{n}.py:{n}: String(value_{n})\n" for n in range(300))
    steps = [LoopStep("sed -n '1,6p' pkg/mod.py", _lines(1, 6)),
             LoopStep("sed -n '7,12p' pkg/mod.py", _lines(7, 12)),
             LoopStep('grep -R "String(" -n', grep),
             LoopStep("sed -n '13,18p' pkg/mod.py", _lines(13, 18)),
             LoopStep("python -c 'print(1)'", "1\n")]
    short = {item_numbers(n)[1] for n in (1, 2)}
    long = item_numbers(3)[1]

    def ladder(rules: LoopRules, ceiling: int) -> list[str]:
        window = build_window(steps, TreeFiles(root), rules, str(root))
        plan = plan_window(window, tokenizer, ceiling, "t", PREFIX, run_ref="run:r:i")
        assert plan.total_tokens <= ceiling
        return [rung.item_id for rung in plan.budget_steps if rung.ladder_step == "loop_fold_fresh"]

    whole = plan_window(build_window(steps, TreeFiles(root), RULES, str(root)), tokenizer,
                        None, "t", PREFIX, run_ref="run:r:i").total_tokens
    for ceiling in (whole - 40, whole - 400, whole - 1500):
        assert ladder(RULES, ceiling) == [f"E{long}"], ceiling
        oldest = ladder(RULES.without("largest_first"), ceiling)
        assert oldest[:2] == [f"E{n}" for n in sorted(short)], (ceiling, oldest)
    # two outputs of one size: the older folds first
    twins = [LoopStep("python a.py", grep), LoopStep("python b.py", grep.replace("x_", "y_")),
             *steps[3:]]
    plan = plan_window(build_window(twins, TreeFiles(root), RULES, str(root)), tokenizer, None,
                       "t", PREFIX, run_ref="run:r:i")
    assert plan.window.parts[1].tokens == plan.window.parts[3].tokens
    plan = plan_window(build_window(twins, TreeFiles(root), RULES, str(root)), tokenizer,
                       plan.total_tokens - 40, "t", PREFIX, run_ref="run:r:i")
    assert [rung.item_id for rung in plan.budget_steps] == [f"E{item_numbers(1)[1]}"]
    assert [rung.detail for rung in plan.budget_steps] == [LADDER_LARGEST_FIRST]
    # views: a short one of step 1, a long one of step 2, folded by the stride; the fresh
    # outputs (one-line prints) have nothing to give
    viewed = [LoopStep("sed -n '1,4p' pkg/mod.py", _lines(1, 4)),
              LoopStep("sed -n '11,70p' pkg/mod.py", _lines(11, 70)),
              *(LoopStep(f"python -c 'print({n})' # pkg/mod.py", f"{n}\n") for n in range(6))]
    short_view, long_view = (f"E{item_numbers(n)[1]}" for n in (1, 2))

    def view_folds(rules: LoopRules) -> list[str]:
        window = build_window(viewed, TreeFiles(root), rules, str(root))
        assert {p.item_no for p in window.parts if p.kind == FILE_VIEW} >= {
            item_numbers(1)[1], item_numbers(2)[1]}
        whole = plan_window(window, tokenizer, None, "t", PREFIX,
                            run_ref="run:r:i").total_tokens
        window = build_window(viewed, TreeFiles(root), rules, str(root))
        plan = plan_window(window, tokenizer, whole - 20, "t", PREFIX, run_ref="run:r:i")
        return [rung.item_id for rung in plan.budget_steps
                if rung.ladder_step == "loop_fold_view"]

    assert view_folds(RULES) == [long_view]
    assert view_folds(RULES.without("largest_first"))[0] == short_view


def test_the_current_arm_sends_the_history_whole(store, tmp_path):
    steps = [LoopStep("ls", "a\nb\n", thought="Look around."), *_filler(9)]
    context = construct_step(store, run_id="base", instance_id="demo", task="t", steps=steps,
                             tree=_tree(tmp_path / "tree"), prefix=PREFIX, arm="current")
    text = context.messages(prefix=PREFIX)[2]["content"]
    assert "Look around." in text and all(s.output in text for s in steps)
    assert {e.rendering for e in context.window} == {SHOWN_WHOLE}


def test_bad_steps_are_named(store, tmp_path):
    good = {"command": "ls", "output": "a\n"}
    bad_steps = [
        ([good, good, good, {"command": "ls", "output": 1}],
         r"steps\[3\]\.output: expected text, got int"),
        ([{"output": "a"}], r"steps\[0\]\.command: missing"),
        ([{"command": "ls", "output": None}], r"steps\[0\]\.output: expected text, got NoneType"),
        ([{"command": "ls", "output": "", "kind": "bogus"}],
         r"steps\[0\]\.kind: expected one of \['output'"),
        ([good, LoopStep("ls", 123)], r"steps\[1\]\.output: expected text, got int"),  # type: ignore[arg-type]
        ([LoopStep("ls", b"abc")], r"steps\[0\]\.output: expected text, got bytes"),  # type: ignore[arg-type]
        ([LoopStep(5)], r"steps\[0\]\.command: expected text or null, got int"),  # type: ignore[arg-type]
        ([LoopStep("ls", thought=None)], r"steps\[0\]\.thought: expected text"),  # type: ignore[arg-type]
        ([LoopStep("ls", returncode="1")], r"steps\[0\]\.returncode: expected an integer"),  # type: ignore[arg-type]
        ([LoopStep("ls", returncode=True)], r"steps\[0\]\.returncode: expected an integer"),
        ([LoopStep("ls", kind="bogus")], r"steps\[0\]\.kind: expected one of"),
        (None, r"steps: expected a list of steps, got NoneType"),
        ("ls", r"steps: expected a list of steps, got str"),
        ([3], r"steps\[0\]: expected a step object, got int"),
        # a turn's several actions are steps themselves, checked as such
        ([{"command": "ls\npwd", "actions": [good, {"command": "pwd", "output": 2}]}],
         r"steps\[0\]\.actions\[1\]\.output: expected text, got int"),
        ([{"command": "ls", "actions": [good]}], r"steps\[0\]\.actions: expected two or more"),
        ([{"command": "ls\nls", "actions": [good, {**good, "actions": [good, good]}]}],
         r"steps\[0\]\.actions\[1\]\.actions: expected none in an action"),
        ([{"command": None, "actions": [good, good]}],
         r"steps\[0\]\.command: expected the actions' commands"),
        ([{"command": "ls", "actions": "ls"}], r"steps\[0\]\.actions: expected a list of steps"),
        *(([{"command": "ls", "actions": bad}], r"steps\[0\]\.actions: expected a list of steps")
          for bad in ({}, 0, False, "", None)),
        ([{"command": "ls\nls", "actions": [good, {"command": None}]}],
         r"steps\[0\]\.actions\[1\]\.command: expected text, got null"),
        ([{"command": "ls; pwd", "actions": [good, {"command": "pwd", "output": ""}]}],
         r"steps\[0\]\.command: expected the actions' commands, one per line"),
        # a command's result lost on the way is not a command that printed nothing
        ([{"command": "ls"}], r'steps\[0\]\.output: missing \(what the command printed; "" '),
        ([{"command": "ls\npwd", "actions": [good, {"command": "pwd"}]}],
         r"steps\[0\]\.actions\[1\]\.output: missing"),
    ]
    with store.engine.connect() as connection:
        before = connection.exec_driver_sql("SELECT count(*) FROM decision").scalar()
    for steps, message in bad_steps:
        with pytest.raises(RequestError, match=message):
            construct_step(store, run_id="r", instance_id="i", task="t", steps=steps)
    # a tree that is not there would quietly turn every view into a pointer
    for tree, what in ((tmp_path / "typo", "no such directory"),
                       (_tree(tmp_path / "tree") / "pkg" / "mod.py", "not a directory")):
        with pytest.raises(RequestError, match=rf"tree: expected the working tree's directory"
                                                rf".*\({what}\)"):
            construct_step(store, run_id="r", instance_id="i", task="t", steps=[good], tree=tree)
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM decision").scalar() == before
    # a LoopStep's actions given as JSON objects in a list are read as steps, like JSON's
    mixed = LoopStep("ls\nls", actions=[good, good])  # type: ignore[arg-type]
    context = construct_step(store, run_id="r", instance_id="ok", task="t", steps=[mixed])
    assert "text_replaced" not in context.flags
    with pytest.raises(RequestError, match=r"steps\[0\]: unknown field\(s\) \['stdout'\] \(did "
                       r"you mean 'output' for 'stdout'\?\); a step's fields are command, "
                       r"output, "):
        construct_step(store, run_id="r", instance_id="i", task="t",
                       steps=[{"command": "ls", "stdout": ""}])
    with pytest.raises(RequestError, match=r"\['ouput', 'zzz'\] \(did you mean 'output' for "
                       r"'ouput'\?\); a step's"):
        construct_step(store, run_id="r", instance_id="i", task="t",
                       steps=[{"command": "ls", "ouput": "", "zzz": 1}])
    with pytest.raises(RequestError, match=r"unknown field\(s\) \['cmd'\] \(did you mean "
                       r"'command' for 'cmd'\?\)"):
        construct_step(store, run_id="r", instance_id="i", task="t",
                       steps=[{"cmd": "ls", "output": ""}])
    with pytest.raises(RequestError, match="arm: expected one of"):
        construct_step(store, run_id="r", instance_id="i", task="t", steps=[], arm="mask10")
    with pytest.raises(RequestError, match=r"prefix\[0\]: expected a chat message .*got str"):
        construct_step(store, run_id="r", instance_id="i", task="t", steps=[], prefix=["hi"])
    for message, got in (({"role": "system", "content": [{"text": "s"}]}, "content.*got list"),
                         ({"role": "system"}, "content.*got nothing"),
                         ({"role": None, "content": "s"}, "role.*got NoneType")):
        with pytest.raises(RequestError, match=rf"^prefix\[0\]\.{got}$"):
            construct_step(store, run_id="r", instance_id="i", task="t", steps=[],
                           prefix=[message])
    with pytest.raises(RequestError, match=r"prefix: expected a list of chat messages, got str"):
        construct_step(store, run_id="r", instance_id="i", task="t", steps=[], prefix="hi")
    with pytest.raises(RequestError, match=r"prefix\[1\]\.role: expected one of .*'sys'"):
        construct_step(store, run_id="r", instance_id="i", task="t", steps=[],
                       prefix=[{"role": "system", "content": "s"}, {"role": "sys", "content": "t"}])
    # a harness's own field JSON cannot hold (a datetime in its extra, a NaN cost)
    for odd in (object(), float("nan")):
        with pytest.raises(RequestError, match=r"prefix\[0\]: expected values JSON can hold"):
            construct_step(store, run_id="r", instance_id="i", task="t", steps=[],
                           prefix=[{"role": "system", "content": "s", "extra": {"at": odd}}])
    with pytest.raises(RequestError, match=r"seq: expected a positive integer, got True"):
        construct_step(store, run_id="r", instance_id="i", task="t", steps=[], seq=True)


def test_views_follow_the_agent_where_it_works(store, tmp_path):
    root = _tree(tmp_path / "checkout")
    steps = [LoopStep(f"cd {root} && nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)),
             LoopStep(f"grep -rl BETA {root}", f"{root}/pkg/other.py\n"), *_filler(6)]
    # a harness that runs commands in the tree itself: the tree is where they work
    context = construct_step(store, run_id="local", instance_id="demo", task="t", steps=steps,
                             tree=root, prefix=PREFIX, rules=RULES)
    assert [e.rendering for e in context.window[1:4:2]] == [SHOWN_LINES, POINTER]
    assert "files named: pkg/other.py" in context.window[3].text
    # the same commands read as run in /testbed name nothing of this tree
    elsewhere = construct_step(store, run_id="local", instance_id="demo", task="t",
                               steps=steps, tree=root, prefix=PREFIX, rules=RULES,
                               workdir="/testbed")
    assert elsewhere.window[1].rendering == POINTER


def test_the_newest_reasoning_comes_last_and_leaves_the_prefix_alone(tmp_path):
    files = TreeFiles(_tree(tmp_path))
    steps = [LoopStep("ls", "pkg\n", thought="I will replace `return value + 3` next."),
             LoopStep("pwd", "/testbed\n", thought="Then run the tests.")]
    first, second = (build_window(steps[:n], files).text() for n in (1, 2))
    assert first.endswith("[step 1, your reasoning]\nI will replace `return value + 3` next.\n\n")
    without_reasoning = first[: first.index("[step 1, your reasoning]")]
    assert second.startswith(without_reasoning) and "return value + 3" not in second
    assert build_window(steps[:1], files, LoopRules(last_thought=False)).text() \
        == without_reasoning


def test_a_refused_turn_is_shown_whole_as_the_newest_reasoning(tmp_path):
    # the harness ran none of a turn's two blocks (a format error); the agent's next reply
    # re-sends one of them, and only the turn itself holds them
    refused = {"role": "assistant", "content": (
        "THOUGHT: Patch it, then test.\n\n```bash\nsed -i 's/value + 3/value + 4/' "
        "pkg/mod.py\n```\n\n```bash\npytest -q\n```")}
    error = {"role": "user", "content": "Please always provide EXACTLY ONE action in "
                                        "triple backticks, found 2 actions."}
    messages = [{"role": "system", "content": "You run commands."},
                {"role": "user", "content": "Fix pkg/mod.py."}, refused, error]
    run = parse_trajectory({"trajectory_format": "mini-swe-agent-1", "messages": messages})
    steps = [loop_step(step) for step in run.steps]
    assert steps[0].command is None
    text = build_window(steps, TreeFiles(_tree(tmp_path))).text()
    reasoning = text[text.index("[step 1, your reasoning]"):]
    assert "```bash\nsed -i 's/value + 3/value + 4/' pkg/mod.py\n```" in reasoning, text
    assert "```bash\npytest -q\n```" in reasoning and "THOUGHT" not in reasoning


def test_a_view_names_the_files_it_printed_that_are_out_of_play(tmp_path):
    root = _tree(tmp_path)
    search = LoopStep("grep -rn BETA .", "./pkg/other.py:2:BETA = 2\n./notes.txt:1:first note\n")
    # pkg/other.py is named again later (in play); notes.txt is not
    steps = [search, *_filler(8), LoopStep("cat pkg/other.py", "ALPHA = 1\nBETA = 2\n"),
             *_filler(8)]
    part = build_window(steps, TreeFiles(root), RULES).parts[1]
    assert part.rendering == SHOWN_LINES and "2\tBETA = 2" in part.text
    assert part.text.endswith("[E2 also printed: notes.txt]\n\n")


def test_a_file_the_reasoning_names_by_its_path_stays_in_play(tmp_path):
    root = _tree(tmp_path)
    read = LoopStep("nl -ba pkg/mod.py | sed -n '3,8p'", _nl(3, 8))
    # read, then other things; the reasoning (not a command) says the agent goes back
    steps = [read, *_filler(16)]
    assert fold_horizon(len(steps), RULES) == 12

    def view_after(thought: str, rules: LoopRules = RULES) -> LoopPart:
        steps[6] = dataclasses.replace(steps[6], thought=thought)
        return build_window(steps, TreeFiles(root), rules).parts[1]

    view = view_after("Line 6 of /testbed/pkg/mod.py is the one to fix.")
    assert view.rendering == SHOWN_LINES and "6\t    return value + 3" in view.text
    assert view_after("Line 6 of `pkg/mod.py` is the one to fix.").rendering == SHOWN_LINES
    assert view_after("Line 6 of pkg/mod.py is the one to fix.",
                      RULES.without("reasoning_in_play")).rendering == POINTER
    # a bare file name in prose, or another file's path, does not count
    assert view_after("Line 6 of mod.py is the one to fix.").rendering == POINTER
    assert view_after("See otherpkg/mod.py and pkg/mod.pyc.").rendering == POINTER


def test_a_view_out_of_play_stays_out_when_its_file_is_named_again(tmp_path):
    root = _tree(tmp_path)
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,8p'", _nl(3, 8)), *_filler(12)]
    assert fold_horizon(len(steps), RULES) == 8
    assert build_window(steps, TreeFiles(root), RULES).parts[1].rendering == SHOWN_LINES
    steps += _filler(4)
    assert fold_horizon(len(steps), RULES) == 12  # step 1 named it, 11 steps before: out
    out = build_window(steps, TreeFiles(root), RULES).parts[1]
    # `ctxdb why` says which file, and since when (with or without out of play sticking)
    assert (out.rendering, out.rule, out.why) == (
        POINTER, OUT_OF_PLAY_RULE, "pkg/mod.py not named from step 1 to the fold at step 12")
    assert build_window(steps, TreeFiles(root), RULES.without("out_of_play_sticks")).parts[
        1].why == "pkg/mod.py not named from step 1 to the fold at step 12"
    # a command names the file again: the view stays a pointer (the agent reads it anew)
    steps += [LoopStep("python -m pytest pkg/mod.py", "1 passed\n"), *_filler(6)]
    assert fold_horizon(len(steps), RULES) == 20
    out = build_window(steps, TreeFiles(root), RULES).parts[1]
    assert (out.rendering, out.why) == (
        POINTER, "pkg/mod.py not named from step 1 to the fold at step 12")
    back = build_window(steps, TreeFiles(root), RULES.without("out_of_play_sticks"))
    assert back.parts[1].rendering == SHOWN_LINES
    # named within the window at every fold since: it stays a view
    steps[9] = LoopStep("grep -c value pkg/mod.py", "40\n")
    assert build_window(steps, TreeFiles(root), RULES).parts[1].rendering == SHOWN_LINES
    # only the folds since the view's step count: a file named at step 1 (out of play at
    # the fold of step 12) and printed at step 14 is a view at the folds of 16 and 20
    later = [LoopStep("python -m pytest pkg/mod.py", "1 passed\n"), *_filler(12),
             LoopStep("nl -ba pkg/mod.py | sed -n '3,8p'", _nl(3, 8)), *_filler(10)]
    assert fold_horizon(len(later), RULES) == 20
    view = next(part for part in build_window(later, TreeFiles(root), RULES).parts
                if part.item_no == item_numbers(14)[1])
    assert view.rendering == SHOWN_LINES
    # a fold at every step (strides off): out at one step is out for good
    unstrided = dataclasses.replace(RULES, strided=False)
    gap = [LoopStep("nl -ba pkg/mod.py | sed -n '3,8p'", _nl(3, 8)), *_filler(15),
           LoopStep("python -m pytest pkg/mod.py", "1 passed\n"), *_filler(4)]
    assert fold_horizon(len(gap), unstrided) == 17  # named at 1 and 17: out at 12 to 16
    assert build_window(gap, TreeFiles(root), unstrided).parts[1].rendering == POINTER
    assert build_window(gap, TreeFiles(root), dataclasses.replace(
        unstrided, out_of_play_sticks=False)).parts[1].rendering == SHOWN_LINES


def test_the_ladder_always_ends_under_the_ceiling_or_refuses(tmp_path):
    import dataclasses

    from ctxdb.config import load_settings

    root = _tree(tmp_path / "tree")
    report = "".join(f"collected line {i}\n" for i in range(40))
    # short commands the command cut cannot shorten, nor their fold to a pointer (no
    # shorter: left as they are), outputs elided as repeats, and a newest output of one
    # long line
    steps = [LoopStep(f"echo {n}", report + f"run {n}\n") for n in range(40)]
    steps.append(LoopStep("python big.py", "x" * 5000))
    settings = dataclasses.replace(load_settings(), token_ceiling=400)
    # a longer prompt leaves the newest output less than half the ceiling: cut again
    longer = [*PREFIX[:-1], {**PREFIX[-1], "content": PREFIX[-1]["content"] + " rule" * 150}]
    with ContextStore.open(tmp_path / "tight.db", settings=settings) as store:
        for prefix, ladder in ((PREFIX, set()), (longer, {"loop_cut_newest"})):
            context = construct_step(store, run_id=f"tight {len(str(prefix))}",
                                     instance_id="demo", task="t", steps=steps, tree=root,
                                     prefix=prefix, rules=RULES)
            assert context.token_count <= 400
            assert {s.ladder_step for s in context.budget_log} == {
                "loop_cut_newest_to_share", "loop_fold_fresh", "loop_evict_oldest", *ladder}
            # `ctxdb why` of an evicted step names the rung and its size before it
            evicted = next(s for s in context.budget_log if s.ladder_step == "loop_evict_oldest")
            (verdict,) = [row for row in store.why(context.decision_id, evicted.item_id)
                          if row["is_final"]]
            assert verdict["action"] == "evicted"
            assert re.fullmatch(rf"the ceiling's ladder, step {evicted.step_no} "
                                r"\(loop_evict_oldest, \d+ tokens before\)", verdict["detail"])
        assert store.verify() == {}
        huge = [{"role": "system", "content": "rule " * 600}]
        with pytest.raises(RequestError, match="over the ceiling 400"):
            construct_step(store, run_id="tight-prompt", instance_id="demo", task="t",
                           steps=steps, tree=root, prefix=huge, rules=RULES)
    # a step leaves whole, at any ceiling: no output stays without its command, nor the
    # reverse (the newest step's output and command stay)
    for ceiling in range(400, 1600, 100):
        settings = dataclasses.replace(load_settings(), token_ceiling=ceiling)
        with ContextStore.open(tmp_path / f"at-{ceiling}.db", settings=settings) as store:
            context = construct_step(store, run_id="r", instance_id="d", task="t",
                                     steps=steps, tree=root, prefix=PREFIX, rules=RULES)
        shown = {entry.item_id for entry in context.window}
        for number in range(1, len(steps)):
            command_no, output_no, _ = item_numbers(number)
            assert (f"E{command_no}" in shown) == (f"E{output_no}" in shown), (ceiling, number)


def test_odd_outputs_do_not_break_a_view(tmp_path):
    files = TreeFiles(_tree(tmp_path))
    assert viewed_lines(LoopStep("grep -r BETA pkg", "pkg/\x00x.py:BETA\n"), files) is None
    two = "nl -ba pkg/mod.py | sed -n '3,4p' && nl -ba pkg/other.py"
    output = _nl(3, 4) + "     1\tALPHA = 1\n     2\tBETA = 2\n"
    assert viewed_lines(LoopStep(two, output), files) == {"pkg/mod.py": [3, 4],
                                                         "pkg/other.py": [1, 2]}


def test_a_nul_or_undecodable_byte_is_stored_as_a_stand_in_and_kept_as_given(store):

    steps = [LoopStep("printf 'caf\\xe9'", "caf\udce9 \x00end")]
    context = construct_step(store, run_id="odd", instance_id="demo", task="t", steps=steps,
                             prefix=PREFIX)
    assert "text_replaced" in context.flags
    shown = context.render()
    assert "caf\ufffd" in shown and " \u2400end" in shown and "\x00" not in shown
    given = store.request_as_given(context.decision_id)
    assert given["steps"][0]["output"] == "caf\udce9 \x00end"


def test_diff_names_a_loop_windows_parts_by_step(store, tmp_path):
    root = _tree(tmp_path / "tree")
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)), *_filler(11)]
    # the fold is what this names; outputs of a line each would not pay for it
    rules = RULES.without("paying_folds")

    def decision(done: int) -> int:
        return construct_step(store, run_id="loop", instance_id="demo", task="t",
                              steps=steps[:done], tree=root, prefix=PREFIX,
                              rules=rules).decision_id

    appended = store.diff(decision(9), decision(10))
    assert [fact for fact, _ in appended.entered] == ["step 10 command", "step 10 output"]
    # in step order (step 9 before step 10)
    assert [fact for fact, _ in store.diff(decision(8), decision(10)).entered] == [
        "step 9 command", "step 9 output", "step 10 command", "step 10 output"]
    assert not appended.left and not appended.changed and not appended.rewritten
    # at a fold a step's output keeps its name and changes its form; a view read again
    # from the tree, which an edit changed, keeps its form and shows other lines
    before_fold = decision(11)
    (root / "pkg" / "mod.py").write_text(MODULE.replace("value + 2", "value - 2"),
                                         encoding="utf-8")
    after_fold = decision(12)
    folded = store.diff(before_fold, after_fold)
    assert ("step 5 output", SHOWN_WHOLE, POINTER) in folded.changed, folded
    assert [fact for fact, _ in folded.entered] == ["step 12 command", "step 12 output"]
    assert [fact for fact, *_ in folded.rewritten] == ["step 1 output"], folded
    # another run of the same steps on a tree edited otherwise: its view shows other
    # lines; the first part's header, which names each run, is no change
    (root / "pkg" / "mod.py").write_text(MODULE.replace("value + 2", "value * 2"),
                                         encoding="utf-8")
    other = construct_step(store, run_id="other", instance_id="demo", task="t",
                           steps=steps[:11], tree=root, prefix=PREFIX, rules=rules)
    across = store.diff(after_fold, other.decision_id)
    assert [fact for fact, *_ in across.rewritten] == ["step 1 output"], across
    # each part is its step's own: no two state one fact (v_duplicate_fact)
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT COUNT(*) FROM v_duplicate_fact").scalar() == 0
    assert not [fact for fact, *_ in folded.changed if fact == "step 1 output"]


def test_the_arms_report_counts_every_step_and_no_precision_without_gold(store, tmp_path):
    from ctxdb.ab.reports import run_report

    root = _tree(tmp_path / "tree")
    steps = _filler(3)
    for done in range(len(steps) + 1):  # the first step's window: the harness prompt alone
        construct_step(store, run_id="live", instance_id="no-gold", task="t",
                       steps=steps[:done], tree=root, prefix=PREFIX)
    with store.engine.connect() as connection:
        report = run_report(connection, "arms")
    (arm,) = [dict(zip(report.columns, row, strict=True)) for row in report.rows]
    assert arm["decisions"] == len(steps) + 1
    # a live run has no gold facts: its precision is unknown, not 0
    assert arm["precision_items"] is None and arm["gold_recall"] is None


def _log(lines: int) -> str:
    return "".join(f"tests/test_mod.py::test_case_{n} FAILED: assert {n} == {n + 1}\n"
                   for n in range(lines))


def _output_of(window: LoopWindow, step: int) -> LoopPart:
    return next(p for p in window.parts if p.item_no == item_numbers(step)[1])


def _part(step: int, part: int, text: str) -> LoopPart:
    return LoopPart(item_numbers(step)[0] + part, step, "tool_output", text, text,
                    SHOWN_WHOLE, "test")


def test_a_fold_pays_when_its_shrink_over_the_steps_so_far_pays_its_re_send():
    # both windows: steps 1 to 3, then the newest step (done); the fold changes step 2's
    # output, so it re-sends from there on but the newest step's parts (new either way)
    def pays(old: str, new: str, after: str, newest: str, done: int) -> bool:
        def window(output: str) -> LoopWindow:
            return LoopWindow([_part(1, 0, "a"), _part(1, 1, "b"), _part(2, 0, "c"),
                               _part(2, 1, output), _part(3, 0, after),
                               _part(done, 0, newest)])
        return fold_pays(window(old), window(new), done=done)

    # after 9 steps, 9 steps of the shrink at the cached price (0.1) against the re-send's
    # extra (0.9): a fold pays when it shrinks the window by what it re-sends
    assert CACHED_PRICE_RATIO * 9 == pytest.approx(1 - CACHED_PRICE_RATIO)
    after = "z" * 8
    resent = len("y") + len(after)  # step 2's new output, step 3's part ("c" comes before)
    shrunk = len("x" * 10) - len("y")
    assert shrunk == resent  # at the edge: it pays
    assert pays("x" * 10, "y", after, "n" * 10**4, done=9)  # the newest: not counted
    assert not pays("x" * 10, "y", after + "z", "n", done=9)  # one more re-sent
    # a run that has made more steps is taken to make more: a fold that re-sends 25 for 9
    # pays from step 25 on (9 x 25 >= 9 x 25), not at 24
    assert pays("x" * 10, "y", "z" * 24, "n", done=25)
    assert not pays("x" * 10, "y", "z" * 24, "n", done=24)
    # exact at the edge whatever the numbers (43 x 0.1 x 9 < 43 x 0.9 in floating point)
    assert pays("x" * 44, "y", "z" * 42, "n", done=9)
    assert not pays("x", "yy", "", "", done=90)  # grows: never pays
    assert pays("x", "x", "z" * 10**4, "", done=4)  # changes nothing


def test_a_fold_that_would_not_pay_waits_until_one_does(tmp_path):
    # outputs of a line each: folding them to pointers re-sends every step after the
    # first at the full price and shrinks nothing, so the stride's fold waits
    files = TreeFiles(_tree(tmp_path))
    steps = _filler(9)
    before = build_window(steps[:7], files, RULES)
    assert fold_horizon(8, RULES) == 4 and before.horizon == 0
    waited = build_window(steps[:8], files, RULES,
                          settled=SettledParts.of(before, steps[:7], RULES))
    assert waited.fold_waited and waited.horizon == 0
    assert waited.text().startswith(before.text())  # a prompt cache serves all of it
    again = build_window(steps[:9], files, RULES,
                         settled=SettledParts.of(waited, steps[:8], RULES))
    assert again.horizon == 0 and again.text().startswith(waited.text())
    # the rule off, or no earlier window to continue: the fold is at the stride
    folded = build_window(steps[:8], files, RULES.without("paying_folds"),
                          settled=SettledParts.of(before, steps[:7], RULES))
    for window in (folded, build_window(steps[:8], files, RULES)):
        assert window.horizon == 4 and not window.fold_waited
    # nor does a fold wait when the window that waits would not fit the ceiling: four
    # outputs that shrink a little, then long ones that a fold would re-send
    some = [LoopStep(f"python -c 'print({n})'", f"value {n}, " * 12 + "\n") for n in range(4)]
    some += [LoopStep(f"python run_{n}.py", "".join(f"line {n}.{i}\n" for i in range(200)))
             for n in range(4)]
    before = build_window(some[:7], files, RULES)
    waits = build_window(some, files, RULES, settled=SettledParts.of(before, some[:7], RULES))
    folded = build_window(some, files, RULES.without("paying_folds"))
    assert waits.fold_waited and len(folded.text()) < len(waits.text())
    ceiling = len(folded.text())  # (characters here; the adapter counts tokens)
    tight = build_window(some, files, RULES, settled=SettledParts.of(before, some[:7], RULES),
                         fits=lambda window: len(window.text()) <= ceiling)
    assert tight.horizon == 4 and not tight.fold_waited and tight.text() == folded.text()
    # a long test log among the outputs to fold: its pointer pays for the re-send
    long = [*steps[:2], LoopStep("pytest tests", _log(80), returncode=1), *steps[3:8]]
    before = build_window(long[:7], files, RULES)
    folded = build_window(long, files, RULES, settled=SettledParts.of(before, long[:7], RULES))
    assert folded.horizon == 4 and not folded.fold_waited
    assert _output_of(folded, 3).rendering == POINTER


def _stored_body(store, decision_id: int, run_id: str, instance_id: str) -> str:
    """A loop window's parts as the store holds them, its header line left out."""
    with store.engine.connect() as connection:
        text = "".join(row[0] for row in connection.exec_driver_sql(
            "SELECT rendered_text FROM v_window_item WHERE decision_id = ? ORDER BY position",
            (decision_id,)))
    return text.removeprefix(MASK_HINT.format(ref=run_ref(run_id, instance_id)) + "\n\n")


def test_a_waited_fold_is_flagged_and_read_back_from_the_store(store, tmp_path):
    root = _tree(tmp_path / "tree")
    steps = [*_filler(6), LoopStep("pytest tests", _log(80), returncode=1), *_filler(5)]

    def construct(done: int):
        return construct_step(store, run_id="loop", instance_id="wait", task="t",
                              steps=steps[:done], tree=root, prefix=PREFIX, rules=RULES)

    def body(context) -> str:
        return _stored_body(store, context.decision_id, "loop", "wait")

    construct(7)
    windows = [construct(done) for done in range(8, 12)]
    # each continues the window that waited, its horizon read back from the flag
    assert all(window.flags == ("task_in_prefix", "fold_waited:0") for window in windows)
    # why an output is still shown whole: the fold that waited, and why it waited
    render = next(row for row in store.why(windows[0].decision_id, f"E{item_numbers(1)[1]}")
                  if row["stage"] == "render")
    assert render["detail"] == ("fold horizon: step 0; the fold to step 4 waited: re-sending "
                                "uncached the parts from the first one it changes would "
                                "cost more, beyond their cached price, than its shrink "
                                "saves at the cached price in 8 steps, the run's length "
                                "so far (paying folds)")
    for earlier, later in itertools.pairwise(windows):
        assert body(later).startswith(body(earlier))
    # at the next stride the long log (step 7) is among the outputs to fold: that pays
    folded = construct(12)
    assert folded.flags == ("task_in_prefix",)
    assert [row["detail"] for row in store.why(folded.decision_id, f"E{item_numbers(1)[1]}")
            if row["stage"] == "render"] == ["fold horizon: step 8"]
    assert "test_case_79" in body(windows[-1]) and "test_case_79" not in body(folded)


def test_a_window_that_waits_keeps_its_views_as_shown_and_the_notes_of_their_changes(
        store, tmp_path):
    # step 1 prints lines 3-6, step 2's long log makes the first fold (horizon 4) pay,
    # step 9 edits line 4; the next stride's fold (horizon 8) would fold one-line outputs
    # only: it waits, and the window goes on as shown, the view with its note after step 9
    root = _tree(tmp_path / "tree")
    edit = LoopStep("sed -i 's/value + 2$/value - 2/' pkg/mod.py", "")
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)),
             LoopStep("pytest tests", _log(80), returncode=1), *_filler(6), edit,
             *_filler(4)]
    settled = None
    bodies, flags = {}, {}
    for done in range(1, len(steps) + 1):
        if done == 9:  # the edit ran
            module = root / "pkg" / "mod.py"
            module.write_text(module.read_text().replace("value + 2\n", "value - 2\n"))
        context = construct_step(store, run_id="loop", instance_id="edit", task="t",
                                 steps=steps[:done], tree=root, prefix=PREFIX, rules=RULES)
        bodies[done], flags[done] = _stored_body(store, context.decision_id, "loop", "edit"), \
            context.flags
        # the replay's ablation arms build the same windows in memory
        window = build_window(steps[:done], TreeFiles(root), RULES, str(root), settled,
                              prompt_names(PREFIX, "t"))
        plan = plan_window(window, "cl100k_base", 24_000, "t", PREFIX, run_ref("loop", "edit"))
        assert window.text() == bodies[done], done
        settled = SettledParts.of(window, steps[:done], RULES)
    assert flags[8] == ("task_in_prefix",) and plan.budget_steps == []
    assert [done for done in flags if "fold_waited:4" in flags[done]] == [12, 13]
    assert "value + 2" in bodies[11] and "value - 2" in bodies[11]  # the view, its note
    assert bodies[12].startswith(bodies[11]) and bodies[13].startswith(bodies[12])


def test_an_output_the_harness_cut_is_kept_whole_when_the_harness_gave_it(store, tmp_path,
                                                                          capsys):
    from ctxdb.cli import main

    # mini-swe-agent 2.x cuts a long output for the model and keeps it whole (raw_output):
    # the window promises `ctxdb show` prints a masked output whole, so the store keeps that
    whole = "".join(f"case {n} PASSED\n" for n in range(300))
    cut = ("<warning>the output was too long: its head and tail</warning>\n"
           + "".join(f"case {n} PASSED\n" for n in (*range(20), *range(280, 300))))
    steps = [LoopStep("pytest -v", whole, kind=ObservationKind.OUTPUT_CUT, returncode=0,
                      observation=cut), *_filler(8)]
    context = construct_step(store, run_id="loop", instance_id="demo", task="t", steps=steps,
                             tree=_tree(tmp_path / "tree"), prefix=PREFIX, rules=RULES)
    output_item = f"E{item_numbers(1)[1]}"
    assert f"[{output_item} test output masked: 300 lines" in context.render()
    assert store.show(context.decision_id, output_item) == whole
    # and `ctxdb show` says it prints more than the model was shown
    assert main(["show", str(context.decision_id), output_item, "--db",
                 str(tmp_path / "loop.db")]) == 0
    assert capsys.readouterr().out.splitlines()[2:4] == [
        "# step 1's output whole follows (the harness showed the model only its head and "
        "tail)", "case 0 PASSED"]
    # fresh, the window shows what the harness showed: a cut of what the store keeps
    fresh = construct_step(store, run_id="loop", instance_id="fresh", task="t", steps=steps[:2],
                           tree=_tree(tmp_path / "tree2"), prefix=PREFIX, rules=RULES)
    shown = next(e for e in fresh.window if e.item_id == output_item)
    assert shown.rendering == SHOWN_CUT and "case 150 PASSED" not in fresh.render()
    assert store.show(fresh.decision_id, output_item) == whole
    # a 1.x harness keeps only the cut: the store keeps what the harness showed
    only_cut = LoopStep("pytest -v", cut.split("\n", 1)[1], kind=ObservationKind.OUTPUT_CUT,
                        returncode=0, observation=cut)
    assert only_cut.kept == cut


def test_a_pointer_says_a_command_timed_out_or_a_test_run_failed(tmp_path):
    steps = [LoopStep("sleep 100", "", kind=ObservationKind.TIMEOUT),
             LoopStep("pytest -q tests", "F.\n1 failed, 1 passed\n", returncode=1),
             LoopStep("pytest -q tests", "..\n2 passed\n", returncode=0),
             # grep found nothing: an answer, not a failure
             LoopStep("grep -rn no_such_name pkg", "", returncode=1),
             LoopStep("cat missing.py", "cat: missing.py: No such file or directory\n",
                      returncode=1),
             LoopStep("python repro.py", "DeprecationWarning: Using or importing the ABCs\n"
                      "Traceback (most recent call last):\n  File \"repro.py\", line 3\n"
                      "sympy.core.sympify.SympifyError: " + "x" * 300 + "\n", returncode=1),
             *_filler(7)]
    text = build_window(steps, TreeFiles(_tree(tmp_path)), RULES).text()
    pointer = {n: f"[E{item_numbers(n)[1]} " for n in range(1, 6)}
    assert f"{pointer[1]}error: no output; timed out]" in text, text
    assert f"{pointer[2]}test output masked: 2 lines; exit 1" in text, text
    assert f"{pointer[3]}test output masked: 2 lines" in text and "exit 0" not in text
    assert f"{pointer[4]}tool output: no output]" in text, text
    assert f"{pointer[5]}error masked: 1 line" in text, text
    assert observation_kind(steps[3]) == "tool_output" and observation_kind(steps[4]) == "error"
    # a folded traceback says what it raised (its last exception line, cut)
    exception = "sympy.core.sympify.SympifyError: " + "x" * 300
    raised = f"; raised: {exception[:RAISED_SHOWN_MAX_CHARS - 1]}…"
    assert f"[E{item_numbers(6)[1]} traceback masked: 4 lines{raised};" in text, text


def test_a_turn_that_read_a_file_and_ran_something_folds_to_the_view_and_a_pointer(
        store, tmp_path):
    """A function-calling agent reads and runs in one turn: the folded turn keeps the
    lines its reading action printed, and says what the other action ran and printed."""
    root = _tree(tmp_path / "tree")
    grep = "grep -n 'def ' pkg/mod.py"
    printed = "".join(f"{n}:{line}\n" for n, line in enumerate(
        (root / "pkg" / "mod.py").read_text(encoding="utf-8").splitlines(), start=1)
        if "def " in line)
    log = "a1789aa initial_commit_marker\n"
    mixed = {"command": f"{grep}\ngit log --oneline", "output": printed + log, "actions": [
        {"command": grep, "output": printed, "returncode": 0},
        {"command": "git log --oneline", "output": log, "returncode": 0}]}
    context = construct_step(store, run_id="mixed", instance_id="demo", task="t",
                             steps=[mixed, *_filler(8)], tree=root, prefix=PREFIX,
                             rules=RULES)
    text = context.render()
    output_item = item_numbers(1)[1]
    assert f"[E{output_item} pkg/mod.py line" in text, text  # the view, folded
    for line in printed.splitlines():
        number, code = line.split(":", 1)
        assert f"{number}\t{code}" in text
    # right after the view's last line, the part's blank line after it
    assert (f"79\tdef function_40(value):\n[E{output_item} also ran `git log --oneline`: "
            "tool output masked: 1 line; names: a1789aa, initial_commit_marker]\n\n[step 2]"
            ) in text, text
    # an action's pointer lists the names its own output was the first to show: not a
    # name the reading action showed ("value"), though "values" holds it
    checking = {**mixed, "command": f"{grep}\npython -c 1", "actions": [
        mixed["actions"][0], {"command": "python -c 1", "output": "checking values\n"}]}
    context = construct_step(store, run_id="mixed-names", instance_id="demo", task="t",
                             steps=[checking, *_filler(8)], tree=root, prefix=PREFIX,
                             rules=RULES)
    assert (f"[E{output_item} also ran `python -c 1`: tool output masked: 1 line; "
            "names: checking, values]") in context.render()
    # a reading action that failed has no lines in the view: its pointer says it failed
    missing = "cat: pkg/gone.py: No such file or directory\n"
    failed = {**mixed, "command": f"cat pkg/gone.py\n{grep}", "output": missing + printed,
              "actions": [{"command": "cat pkg/gone.py", "output": missing, "returncode": 1},
                          mixed["actions"][0]]}
    context = construct_step(store, run_id="mixed-failed", instance_id="demo", task="t",
                             steps=[failed, *_filler(8)], tree=root, prefix=PREFIX,
                             rules=RULES)
    assert (f"79\tdef function_40(value):\n[E{output_item} also ran `cat pkg/gone.py`: "
            "error masked: 1 line") in context.render(), context.render()
    # a turn of actions none of which read a file stays one pointer
    ran = {"command": "git status\ngit log --oneline", "output": "clean\n" + log,
           "actions": [{"command": "git status", "output": "clean\n"},
                       {"command": "git log --oneline", "output": log}]}
    context = construct_step(store, run_id="mixed-2", instance_id="demo", task="t",
                             steps=[ran, *_filler(8)], tree=root, prefix=PREFIX, rules=RULES)
    assert f"[E{output_item} tool output masked: 2 lines" in context.render()


def test_a_tool_call_is_shown_as_made_and_read_by_its_shell_equivalent(store, tmp_path):
    """A function-calling agent's editor tool: the window shows each call as the agent
    made it; the rules read the shell command given beside it (a view, an edit)."""
    root = _tree(tmp_path / "tree")
    view_call = 'str_replace_editor {"command": "view", "path": "pkg/mod.py"}'
    view = LoopStep("cat -n pkg/mod.py", "Here's the result of running `cat -n` on "
                    "pkg/mod.py:\n" + _nl(1, 80), call=view_call)
    (root / "pkg" / "mod.py").write_text(MODULE.replace("value + 3", "value - 3"),
                                         encoding="utf-8")
    edit_call = ('str_replace_editor {"command": "str_replace", "path": "pkg/mod.py", '
                 '"old_str": "value + 3", "new_str": "value - 3"}')
    edit = LoopStep("sed -i 's/value + 3/value - 3/' pkg/mod.py",
                    "The file pkg/mod.py has been edited.", call=edit_call)
    assert decision_type_of([view]) == "localize" and decision_type_of([view, edit]) == "edit"
    # a call with no shell equivalent answers with its tool's output, not the harness's note
    assert observation_kind(LoopStep(None, "     1\tx = 1\n", call="editor undo_edit")) \
        == "tool_output" != observation_kind(LoopStep(None, "Reply with one command."))
    # a turn of a call and a shell command: each action as the agent made it
    both = LoopStep("cat -n pkg/mod.py\nls", "", actions=(view, LoopStep("ls", "pkg\n")))
    assert both.said == f"{view_call}\n$ ls" and LoopStep("ls").said == "$ ls"
    steps = [step_json(view), step_json(edit), *_filler(8)]
    context = construct_step(store, run_id="calls", instance_id="demo", task="t",
                             steps=steps, tree=root, prefix=PREFIX, rules=RULES)
    text = context.render()
    assert context.decision_type == store.context(context.decision_id).decision_type == "edit"
    assert f"[step 1] {view_call}\n" in text and f"[step 2] {edit_call}\n" in text, text
    assert "cat -n pkg/mod.py" not in text and "sed -i" not in text  # never seen by the model
    view_item = item_numbers(1)[1]
    assert f"[E{view_item} pkg/mod.py lines 1-80, as the tree holds them now]" in text, text
    assert "5\tdef function_3(value):\n6\t    return value - 3\n" in text
    # kept as given; a step without a call as before
    stored = store.request_as_given(context.decision_id)["steps"]
    assert stored[1]["call"] == edit_call and "call" not in stored[2]
    # the history as the harness sent it shows the calls too
    current = construct_step(store, run_id="calls-current", instance_id="demo", task="t",
                             steps=steps, tree=root, prefix=PREFIX, arm="current")
    assert f"[step 2] {edit_call}\n" in current.render()
    for bad, message in (
            ({"command": "ls", "output": "", "call": 3}, r"call: expected text or null, got int"),
            ({"command": "ls", "output": "", "call": ""}, r"call: expected the call's text"),
            ({"command": None, "call": "editor {}"}, r"output: missing"),
            ({"command": "ls\nls", "output": "", "call": "two", "actions": [
                {"command": "ls", "output": ""}, {"command": "ls", "output": ""}]},
             r"call: expected null in a turn of several actions"),
            ({"command": "ls", "output": "", "call": "   "}, r"call: expected the call's text"),
            ({"actions": [{"command": "ls", "output": ""}, {"command": "pwd"}]},
             r"actions\[1\]\.output: missing")):
        with pytest.raises(RequestError, match=rf"^steps\[0\]\.{message}"):
            construct_step(store, run_id="calls-bad", instance_id="demo", task="t",
                           steps=[bad], tree=root, prefix=PREFIX)
    # a turn of several actions may leave its command and output to them
    derived = construct_step(store, run_id="calls-derived", instance_id="demo", task="t",
                             steps=[{"actions": [{"command": "ls", "output": "pkg\n"},
                                                 {"command": "pwd", "output": "/r\n"}]}],
                             tree=root, prefix=PREFIX)
    (given,) = store.request_as_given(derived.decision_id)["steps"]
    assert (given["command"], given["output"]) == ("ls\npwd", "pkg\n\n/r\n")
    # a call with no shell equivalent, as one of a turn's actions; the names a call
    # shows are shown (a later pointer does not list them), its shell equivalent's are not
    undo = 'editor {"command": "undo_edit", "path": "pkg/shown_by_call.py"}'
    turn = {"command": "cat -n pkg/unseen_equivalent.py", "output": "", "actions": [
        {"command": None, "call": undo, "output": "nothing to undo"},
        {"command": "cat -n pkg/unseen_equivalent.py", "call": "editor view",
         "output": ""}]}
    later = LoopStep("python -c 2", "shown_by_call unseen_equivalent\n")
    context = construct_step(store, run_id="calls-undo", instance_id="demo", task="t",
                             steps=[turn, later, *_filler(8)], tree=root, prefix=PREFIX,
                             rules=RULES)
    text = context.render()
    assert f"[step 1] {undo}\neditor view\n" in text, text
    # a turn of calls alone, each with no shell equivalent: shown in both arms, and a
    # bare failed call says it failed
    calls_only = {"actions": [{"command": None, "call": "editor undo_edit pkg/a.py",
                               "output": "", "returncode": 1},
                              {"command": None, "call": "editor undo_edit pkg/b.py",
                               "output": "undone\n"}]}
    for arm in ("ctx08", "current"):
        shown = construct_step(store, run_id=f"calls-only-{arm}", instance_id="demo",
                               task="t", steps=[calls_only], tree=root, prefix=PREFIX,
                               arm=arm).render()
        assert "[step 1] editor undo_edit pkg/a.py\neditor undo_edit pkg/b.py\n" in shown, arm
        assert (f"[E{item_numbers(1)[1]} from `editor undo_edit pkg/a.py`]\n(no output)\n"
                "(exit 1)\n") in shown, (arm, shown)
    # two long calls told apart by their ends (a path), not cut off before them
    long_calls = {"actions": [
        {"command": f"cat -n pkg/{name}.py", "output": "",
         "call": f'str_replace_editor {{"command": "view", "path": "/testbed/a/very/long/'
                 f'directory/name/to/reach/pkg/{name}.py"}}'} for name in ("mod", "other")]}
    shown = construct_step(store, run_id="calls-long", instance_id="demo", task="t",
                           steps=[long_calls], tree=root, prefix=PREFIX).render()
    assert 'pkg/mod.py"}`]' in shown and 'pkg/other.py"}`]' in shown, shown
    # derived whatever else the turn gives (an observation of the harness's own)
    observed = construct_step(store, run_id="calls-observed", instance_id="demo", task="t",
                              steps=[{**calls_only, "observation": "<two results>"}],
                              tree=root, prefix=PREFIX)
    assert store.request_as_given(observed.decision_id)["steps"][0]["output"] == "\nundone\n"
    assert f"[E{item_numbers(2)[1]} tool output masked: 1 line; names: unseen_equivalent]" \
        in text, text


def test_a_turns_several_actions_each_run_from_the_working_directory(store, tmp_path):
    root = _tree(tmp_path / "tree")
    (root / "tests").mkdir()
    (root / "conftest.py").write_text("ROOT_MARKER = 1\n", encoding="utf-8")
    (root / "tests" / "conftest.py").write_text("TESTS_MARKER = 1\n", encoding="utf-8")
    (root / "pkg" / "again.py").write_text("    return value + 3\nGAMMA = 3\n", encoding="utf-8")
    # a cd in one action does not carry to the next: the agent saw the root's conftest.py
    moved = LoopStep("cd tests\nnl -ba conftest.py", "\n     1\tROOT_MARKER = 1\n",
                     actions=(LoopStep("cd tests", ""),
                              LoopStep("nl -ba conftest.py", "     1\tROOT_MARKER = 1\n")))
    # two files printed by two actions: each file's lines are found in its own output
    two = LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'\ncat pkg/again.py",
                   _nl(3, 6) + "\n    return value + 3\nGAMMA = 3\n",
                   actions=(LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)),
                            LoopStep("cat pkg/again.py", "    return value + 3\nGAMMA = 3\n")))
    files = TreeFiles(root)
    assert viewed_lines(moved, files) == {"conftest.py": [1]}
    assert viewed_lines(two, files) == {"pkg/mod.py": [3, 4, 5, 6], "pkg/again.py": [1, 2]}
    # read as one script, the cd carried and the second file's lines mixed with the first's
    joined = dataclasses.replace(moved, actions=())
    assert viewed_lines(joined, files) != viewed_lines(moved, files)
    # a step of actions not all reading: the views are its reading actions'
    ran = LoopStep("cat conftest.py\npython -c 'print(1)'", "ROOT_MARKER = 1\n\n1\n",
                   actions=(LoopStep("cat conftest.py", "ROOT_MARKER = 1\n"),
                            LoopStep("python -c 'print(1)'", "1\n")))
    assert viewed_lines(ran, files) == {"conftest.py": [1]}
    assert viewed_lines(ran.actions[1], files) is None
    # through the adapter, as JSON, the window shows the file the agent saw
    as_json = {"command": moved.command, "output": moved.output, "actions": [
        {"command": a.command, "output": a.output} for a in moved.actions]}
    context = construct_step(store, run_id="acts", instance_id="demo", task="t",
                             steps=[as_json, *_filler(8)], tree=root, prefix=PREFIX,
                             rules=RULES)
    text = context.render()
    assert "1\tROOT_MARKER = 1" in text and "TESTS_MARKER" not in text, text
    assert "tests/conftest.py" not in text
    # the request keeps the actions, and a step without them as before
    stored = store.request_as_given(context.decision_id)
    actions = stored["steps"][0]["actions"]
    assert [a["command"] for a in actions] == ["cd tests", "nl -ba conftest.py"]
    assert "actions" not in stored["steps"][1]


def test_a_printed_stretch_shows_the_lines_an_edit_put_inside_it(tmp_path):
    root = _tree(tmp_path)
    inserted = MODULE.replace("def function_3(value):\n",
                              "def function_3(value):\n    check(value)\n    log(value)\n")
    files = TreeFiles(root)
    stretch = LoopStep("sed -n '3,8p' pkg/mod.py", _lines(3, 8))
    numbered = LoopStep("nl -ba pkg/mod.py | sed -n '3,8p'", _nl(3, 8))
    picked = LoopStep("sed -n '/function_[34]/p' pkg/mod.py",
                      "def function_3(value):\ndef function_4(value):\n")
    (root / "pkg" / "mod.py").write_text(inserted, encoding="utf-8")
    # a stretch (by text or by number) reads as contiguous: the new lines are in it
    assert viewed_lines(stretch, files) == {"pkg/mod.py": list(range(3, 11))}
    assert viewed_lines(numbered, files) == {"pkg/mod.py": list(range(3, 11))}
    # lines a pattern picked are not a stretch: what lies between them was never printed
    assert viewed_lines(picked, files) == {"pkg/mod.py": [5, 9]}
    # an edit that put far more inside the stretch than it held: only the lines printed
    grown = MODULE.replace("def function_3(value):\n",
                           "def function_3(value):\n" + "    step()\n" * 20)
    (root / "pkg" / "mod.py").write_text(grown, encoding="utf-8")
    assert viewed_lines(stretch, TreeFiles(root)) == {"pkg/mod.py": [3, 4, 5, *range(26, 29)]}
    # a printed line found back above the stretch (an edit changed it, its text is also
    # further up): another line, left out, and nothing filled
    (root / "pkg" / "mod.py").write_text(MODULE.replace("    return value + 9\n", "    pass\n"),
                                         encoding="utf-8")
    late = LoopStep("sed -n '21,25p' pkg/mod.py", "def function_11(value):\n    return value"
                    " + 11\ndef function_12(value):\n    pass\ndef function_13(value):\n")
    assert viewed_lines(late, TreeFiles(root)) == {"pkg/mod.py": [21, 22, 23, 25]}
    # lines followed by their numbers may have moved apart, each confirmed: all kept, none
    # filled between
    lines = MODULE.splitlines()
    assert _stretch_now([5, 6, 3, 7], lines, by_number=True) == [3, 5, 6, 7]
    assert _stretch_now([5, 6, 3, 7], lines) == [5, 6, 7]
    assert _stretch_now([5, 7], lines, by_number=True) == [5, 6, 7]


def test_show_of_a_loop_view_says_what_the_window_read_and_what_the_step_printed(
        store, tmp_path, capsys):
    from ctxdb.cli import main

    root = _tree(tmp_path / "tree")
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)), *_filler(8)]
    (root / "pkg" / "mod.py").write_text("# added\n" + MODULE, encoding="utf-8")
    context = construct_step(store, run_id="loop", instance_id="demo", task="t", steps=steps,
                             tree=root, prefix=PREFIX, rules=RULES)
    assert main(["show", str(context.decision_id), "E2", "--db", str(tmp_path / "loop.db")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(the window showed pkg/mod.py:4-7 as the tree held them)"), out
    assert out[2] == "# step 1's output as the harness gave it follows"
    assert out[3:] == [*_nl(3, 6).splitlines(), ""]  # the output ends with its newline
    # a turn is kept whole, its reasoning with its command; the line before says so
    steps[0] = dataclasses.replace(steps[0], thought="Read the middle of the module.")
    context = construct_step(store, run_id="loop", instance_id="turn", task="t", steps=steps,
                             tree=root, prefix=PREFIX, rules=RULES)
    assert main(["show", str(context.decision_id), "E1", "--db", str(tmp_path / "loop.db")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == ("# step 1's turn as the agent gave it follows, its reasoning included "
                      "(the window shows its command; its reasoning only where a rule keeps "
                      "it)")
    assert "Read the middle of the module." in out[3:], out
    assert "Read the middle" not in store.show(context.decision_id)  # the window: the command


def test_a_view_whose_new_lines_are_all_blank_points_to_the_ones_shown_above(tmp_path):
    root = tmp_path
    (root / "spaced.py").write_text("a = 1\n\nb = 2\n\n\nc = 3\n", encoding="utf-8")
    numbered = "".join(f"{n:6}\t{line}\n" for n, line in
                       enumerate(["a = 1", "", "b = 2", "", "", "c = 3"], start=1))
    steps = [LoopStep("grep -n '=' spaced.py", "1:a = 1\n3:b = 2\n6:c = 3\n"),
             LoopStep("nl -ba spaced.py", numbered), *_filler(8)]
    window = build_window(steps, TreeFiles(root), RULES)
    text = window.text()
    assert f"[E{item_numbers(2)[1]} spaced.py: the lines it showed are shown above]" in text, text
    # the part is still of its file: the store names it (`ctxdb why D --entity spaced.py`)
    (above,) = [p for p in window.parts if p.item_no == item_numbers(2)[1]]
    assert above.path == "spaced.py"
    assert "\n2\t\n" not in text
    # blank lines with nothing shown above: they are what the view showed
    blank = "".join(f"{n:6}\t\n" for n in (4, 5))
    alone = build_window([LoopStep("nl -ba spaced.py | sed -n '4,5p'", blank), *_filler(8)],
                         TreeFiles(root), RULES).text()
    assert "[E2 spaced.py lines 4-5, as the tree holds them now]\n4\t\n5\t\n" in alone, alone


def test_why_finds_a_loop_windows_views_by_their_file(store, tmp_path):
    root = _tree(tmp_path / "tree")
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)), *_filler(8)]
    context = construct_step(store, run_id="loop", instance_id="demo", task="t", steps=steps,
                             tree=root, prefix=PREFIX, rules=RULES)
    rows = store.why(context.decision_id, "pkg/mod.py")
    assert rows and rows[-1]["is_final"] and rows[-1]["window_rendering"] == SHOWN_LINES
    assert rows[0]["provenance"] == "live: step 1 output of the agent loop"
    # a file no part is a view of: the error says how to name a pointer instead
    with pytest.raises(NotFound, match=r"no pool item of entity 'pkg/other.py'.*an agent "
                       r"loop's output names its file only while it is a view: name a "
                       r"pointer by its item \(step k's output is E\(4k-2\)\)"):
        store.why(context.decision_id, "pkg/other.py")


def test_a_turns_several_actions_fail_or_answer_each_on_its_own():
    edit = LoopStep("sed -i s/a/b/ pkg/mod.py", "", returncode=0)

    def turn(*actions: LoopStep) -> LoopStep:
        return LoopStep("\n".join(a.command or "" for a in actions), "", actions=actions,
                        returncode=next((a.returncode for a in actions if a.returncode), 0))

    no_match = LoopStep("grep -n nothing pkg/mod.py", "", returncode=1)
    passed = LoopStep("python -m pytest -q tests", "3 passed\n", returncode=0)
    failed = LoopStep("python -m pytest -q tests", "1 failed\n", returncode=1)
    listed = LoopStep("cat pkg/other.py", "ALPHA = 1\n", returncode=0)
    # a grep that found nothing beside a cat: no failure, whatever the merged status says
    assert observation_kind(turn(no_match, listed)) == "tool_output"
    assert decision_type_of([edit, turn(no_match, listed)]) == "edit"
    # a passing test run beside that grep: a passing test run
    both = turn(passed, no_match)
    assert observation_kind(both) == "test_output"
    assert "exit" not in pointer_label(both, "test_output")
    assert decision_type_of([edit, both]) == "edit"
    # a failing one: repair, and its pointer says so
    failing = turn(listed, failed)
    assert pointer_label(failing, "test_output").endswith("; exit 1")
    assert decision_type_of([edit, failing]) == "repair"
    # a passing test run beside a failed read: a failure in the turn all the same
    missing = LoopStep("cat nope.py", "cat: nope.py: No such file or directory\n", returncode=1)
    assert decision_type_of([edit, turn(passed, missing)]) == "repair"


def test_a_runs_history_is_stored_once_and_every_request_comes_back_as_given(store_url,
                                                                           tmp_path):
    with ContextStore.open(store_url) as store:
        _history_stored_once(store, tmp_path)


def _history_stored_once(store, tmp_path):
    root = _tree(tmp_path / "tree")
    outputs = [f"line {n} " * 2_000 for n in range(1, 21)]  # 20 outputs of 16 KB
    history = [LoopStep(f"echo {n}", output) for n, output in enumerate(outputs, start=1)]
    contexts = [construct_step(store, run_id="long", instance_id="i", task="t",
                               steps=history[:done], tree=root, prefix=PREFIX, rules=RULES)
                for done in range(len(history) + 1)]
    with store.engine.connect() as connection:
        stored = connection.exec_driver_sql(
            "SELECT SUM(LENGTH(request_json)) FROM decision WHERE run_id = 'long'").scalar()
    # each output once (in its step, and as its part's text), not once per decision after it
    assert stored < 20 * 2_000, stored
    # and the harness's prompt once per run, not in every decision's request
    with store.engine.connect() as connection:
        assert connection.execute(select(func.count()).where(
            models.decision.c.run_id == "long",
            models.decision.c.request_json.contains(PREFIX[0]["content"]))).scalar() == 0
    for done, context in enumerate(contexts):
        given = store.request_as_given(context.decision_id)
        assert given == {"run_id": "long", "instance_id": "i", "seq": done + 1,
                         "arm": "ctx08", "task": "t", "prefix": PREFIX,
                         "steps": [step_json(step) for step in history[:done]]}
        assert list(given) == ["run_id", "instance_id", "seq", "arm", "task", "prefix", "steps"]
        assert [step["output"] for step in given["steps"]] == outputs[:done]
    # a request stored with its prefix inline (before 2026-12-05) reads back the same
    newest = contexts[-1].decision_id
    given, messages = store.request_as_given(newest), store.context(newest).messages()
    inline = dict(("prefix", PREFIX) if key == "prefix_sha256" else (key, value)
                  for key, value in json.loads(_request_json(store, newest)).items())
    with store.write_transaction() as connection:
        connection.execute(models.decision.update().where(
            models.decision.c.decision_id == newest).values(request_json=json.dumps(inline)))
    assert store.request_as_given(newest) == given
    assert store.context(newest).messages() == messages and messages[:2] == PREFIX
    with pytest.raises(LookupError, match=r"decision 10000 does not exist \(this store "
                       rf"holds decisions 1 to {newest}\)"):
        store.request_as_given(10_000)


def _request_json(store, decision_id):
    with store.engine.connect() as connection:
        return connection.execute(select(models.decision.c.request_json).where(
            models.decision.c.decision_id == decision_id)).scalar_one()


def test_a_current_decision_records_the_messages_sent_each_counted(store_url, tmp_path,
                                                                   capsys):
    """A live ``current`` decision counts what the model is sent, the harness's markup
    and each tool output's message too (as the replay counts its current arm); the
    messages come back as given."""
    root = _tree(tmp_path / "tree")
    wrap = "<returncode>0</returncode>\n<output>\n{}</output>".format
    history = [
        LoopStep("cat notes.txt", "first note\n", thought="Read the notes.",
                 observation=wrap("first note\n"), returncode=0),
        # a reply the harness rejected and did not keep: its complaint alone was sent
        LoopStep(None, "Please always provide EXACTLY ONE action.",
                 kind=ObservationKind.FORMAT_ERROR),
        # a turn of two tool calls: two messages, one per action
        LoopStep("ls\npwd", "notes.txt\n\n/testbed\n", returncode=0,
                 observation="\n".join((wrap("notes.txt\n"), wrap("/testbed\n"))),
                 actions=(LoopStep("ls", "notes.txt\n", observation=wrap("notes.txt\n")),
                          LoopStep("pwd", "/testbed\n", observation=wrap("/testbed\n")))),
        LoopStep("true", "", observation=wrap(""), returncode=0)]
    sent = [*PREFIX,
            {"role": "assistant", "content": "THOUGHT: Read the notes.\n\n```bash\n"
                                             "cat notes.txt\n```", "extra": {"cost": 1}},
            {"role": "user", "content": wrap("first note\n")},
            {"role": "user", "content": "Please always provide EXACTLY ONE action."},
            {"role": "assistant", "content": None},  # tool calls alone: no text
            {"role": "tool", "content": wrap("notes.txt\n"), "tool_call_id": "call_1"},
            {"role": "tool", "content": wrap("/testbed\n"), "tool_call_id": "call_2"},
            {"role": "assistant", "content": "```bash\ntrue\n```"},
            {"role": "user", "content": wrap("")}]
    as_text = [{"role": m["role"], "content": m["content"] or ""} for m in sent]
    with ContextStore.open(store_url) as store:
        context = construct_step(store, run_id="live", instance_id="i", task="t", steps=history,
                                 tree=root, prefix=PREFIX, arm="current", sent=sent)
        counter = PromptCounter(get_counter(store.settings.tokenizer).count)
        assert context.token_count == counter.prompt_tokens(as_text)
        rebuilt = construct_step(store, run_id="rebuilt", instance_id="i", task="t",
                                 steps=history, tree=root, prefix=PREFIX, arm="current")
        assert rebuilt.token_count != context.token_count  # rebuilt: no markup, one message
        given = store.request_as_given(context.decision_id)
        # kept as given: a tool message's call id, a message's keys ctxdb does not read
        assert given["sent"] == sent and given["steps"] == [step_json(s) for s in history]
        assert "sent" not in store.request_as_given(rebuilt.decision_id)
        # read back as the chat messages it sent: the harness's, not ctxdb's one message
        capsys.readouterr()
        for decision, messages in ((context, sent),
                                   (rebuilt, store.context(rebuilt.decision_id).messages())):
            assert cli_main(["show", str(decision.decision_id), "--db", store_url,
                             "--format", "messages"]) == 0
            assert json.loads(capsys.readouterr().out) == messages
        assert len(messages) == len(PREFIX) + 1
        # a message no step accounts for (an interactive harness's user command and its
        # output) is counted with the part before it; a task the prefix lacks is not sent
        typed = [{"role": "user", "content": "User command: \n```bash\nls\n```"},
                 {"role": "user", "content": wrap("notes.txt\n")}]
        for case, (messages, task) in enumerate((
                ([*sent[:4], *typed, *sent[4:]], "t"), ([*sent, *typed], "t"),
                (sent, "a task the harness's prompt does not hold"))):
            counted = construct_step(store, run_id="live", instance_id=f"case-{case}", task=task,
                                     steps=history, tree=root, prefix=PREFIX, arm="current",
                                     sent=messages)
            assert counted.token_count == counter.prompt_tokens(
                [{"role": m["role"], "content": m["content"] or ""} for m in messages])
        # counted as sent, where the store keeps a stand-in (a NUL, a lone surrogate), in
        # an output and in the harness's prompt
        binary = "\x00\x01\x00 \udcff" * 200
        prompt = [PREFIX[0], {"role": "user", "content": PREFIX[1]["content"] + "\x00\udcff"}]
        raw = [*prompt, {"role": "assistant", "content": "```bash\ncat a.pyc\n```"},
               {"role": "user", "content": binary}]
        stored = construct_step(store, run_id="binary", instance_id="i", task="t",
                                steps=[LoopStep("cat a.pyc", binary)], tree=root,
                                prefix=prompt, arm="current", sent=raw)
        assert stored.token_count == counter.prompt_tokens(raw)
        # a user's command before the model's first step, and one whose output the model's
        # next command printed again: each step keeps its own turn and output
        again = [*PREFIX, *typed,
                 {"role": "assistant", "content": "```bash\nls\n```"},
                 {"role": "user", "content": wrap("notes.txt\n")},
                 # a turn no action answered (a model that gave none), then the next one
                 {"role": "assistant", "content": "Thinking, no command."},
                 {"role": "assistant", "content": "```bash\ntrue\n```"},
                 {"role": "user", "content": wrap("")}]
        steps = [LoopStep("ls", "notes.txt\n", observation=wrap("notes.txt\n")),
                 LoopStep(None, "", kind=ObservationKind.NOTE, thought="Thinking, no command."),
                 LoopStep("true", "", observation=wrap(""))]
        for done in range(len(steps) + 1):
            shown = again[:{0: 4, 1: 6, 2: 7, 3: 9}[done]]
            decision = construct_step(store, run_id="again", instance_id=f"upto-{done}",
                                      task="t", steps=steps[:done], tree=root, prefix=PREFIX,
                                      arm="current", sent=shown)
            assert decision.token_count == counter.prompt_tokens(shown), done
        items = {entry.item_id: entry.text for entry in decision.window}
        first_turn, first_output = (f"E{n}" for n in item_numbers(1)[:2])
        assert items[first_turn].startswith("User command:")  # before the first step
        assert items[first_output] == wrap("notes.txt\n") + "\n\n"
        assert items[f"E{item_numbers(2)[0]}"] == "Thinking, no command.\n\n"
        # what ctxdb cannot record as sent is named, and nothing is written
        for wrong, message in (
                (sent[:-1], r"sent\[8\]: no message from here on holds step 4's observation "
                            r"as steps\[3\] shows it \(give each step's observation as the "
                            r"harness sent it"),
                ([*sent[:3], {"role": "user", "content": "other"}, *sent[4:]],
                 r"sent\[2\]: no message from here on holds step 1's observation"),
                (sent[1:], r"sent\[0\]: expected prefix\[0\]"),
                ([*sent[:3], {"role": "user", "content": 7}],
                 r"sent\[3\]: expected a chat message with a role and content text"),
                ([*sent[:2], {**sent[2], "tool_calls": "ls"}, *sent[3:]],
                 r"sent\[2\]\.tool_calls: expected a list of calls"),
                ([*sent[:2], {**sent[2], "extra": {1, 2}}, *sent[3:]],
                 r"sent\[2\]: expected values JSON can hold"),
                ([*sent[:2], {**sent[2], "extra": {"cost": float("nan")}}, *sent[3:]],
                 r"sent\[2\]: expected values JSON can hold"),
                ("hello", "sent: expected a list of chat messages, got str")):
            with pytest.raises(RequestError, match=message):
                construct_step(store, run_id="wrong", instance_id="i", task="t", steps=history,
                               tree=root, prefix=PREFIX, arm="current", sent=wrong)
        # a tool call's turn lost from what was sent, as a command's is
        with pytest.raises(RequestError, match=r"sent\[2\]: no message"):
            construct_step(store, run_id="wrong", instance_id="call", task="t",
                           steps=[LoopStep(None, "undone\n", call="editor undo_edit a.py")],
                           tree=root, prefix=PREFIX, arm="current",
                           sent=[*PREFIX, {"role": "user", "content": "undone\n"}])
        with pytest.raises(RequestError, match="sent: only a decision of arm 'current'"):
            construct_step(store, run_id="wrong", instance_id="i", task="t", steps=history,
                           tree=root, prefix=PREFIX, sent=sent)
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql(
                "SELECT COUNT(*) FROM decision WHERE run_id = 'wrong'").scalar() == 0


def test_a_loop_runs_window_texts_are_stored_once_each(store_url, tmp_path):
    """A window text the next windows repeat is stored once (evidence_text, by digest),
    so a `current` run's texts grow with its history, not with its square; each window
    still reads back exactly as it was sent."""
    root = _tree(tmp_path / "tree")
    wrap = "<returncode>0</returncode>\n<output>\n{}</output>".format
    steps_run = 12
    outputs = [f"a line of output {k}\n" * 40 for k in range(steps_run)]
    history = [LoopStep(f"echo {k}", outputs[k], observation=wrap(outputs[k]), returncode=0)
               for k in range(steps_run)]
    with ContextStore.open(store_url) as store:
        contexts = [construct_step(store, run_id=f"repeat-{arm}", instance_id="i", task="t",
                                   steps=history[:done], tree=root, prefix=PREFIX, arm=arm)
                    for arm in ("current", "ctx08") for done in range(1, steps_run + 1)]
        with store.engine.connect() as connection:
            shown, stored = connection.exec_driver_sql(
                "SELECT SUM(LENGTH(v.rendered_text)),"
                " (SELECT SUM(LENGTH(t.content)) FROM evidence_text t WHERE t.content_sha256 IN"
                "  (SELECT rendered_sha256 FROM window_item))"
                " FROM v_window_item v").one()
        for context in contexts:  # read back as sent
            assert store.context(context.decision_id).window == context.window
    history_text = sum(len(wrap(output)) for output in outputs)
    # every earlier output again in each window: about steps_run / 2 times the history
    assert shown > steps_run / 3 * history_text
    # stored once each (both arms: a part's text and the message it shows are one row)
    assert stored < 3 * history_text


def test_the_previous_window_is_read_by_item_through_its_index(tmp_path):
    """settled_parts reads the previous window beside its pool, item by item: SQLite finds
    each window row by ix_window_item_item (0012), not by scanning the window per item."""
    from sqlalchemy import text

    from ctxdb.sqlfiles import load_sql

    with ContextStore.open(str(tmp_path / "plan.db")) as store, \
            store.engine.connect() as connection:
        plan = " ".join(str(row[-1]) for row in connection.execute(text(
            "EXPLAIN QUERY PLAN " + load_sql("forensics/previous_window_of_run")), {
                "run_id": "r", "instance_id": "i", "seq": 2, "view": SHOWN_LINES,
                "pointer": POINTER, "parts_per_step": 4, "note_part": 0,
                "fold_fresh": "loop_fold_fresh", "fold_view": "loop_fold_view"}))
    assert "USING INDEX ix_window_item_item" in plan, plan
    assert "SCAN b" not in plan, plan  # the ladder's steps by the decision's key


def test_a_loop_window_whose_count_is_an_upper_bound_is_flagged(store, tmp_path):
    """A text with an unbroken run of LONG_RUN_CHARS is counted in slices, an upper bound
    (docs/tokens.md): the decision says so, as a pipeline window's does."""
    root = _tree(tmp_path / "tree")
    long_run = "x" * LONG_RUN_CHARS
    for run_id, steps, prefix, bounded in (
            ("plain", _filler(2), PREFIX, False),
            ("output", [LoopStep("python -c 'print(1)'", f"{long_run}\n"), *_filler(1)],
             PREFIX, True),
            ("prompt", _filler(2), [PREFIX[0], {"role": "user", "content": long_run}], True)):
        for arm in ("ctx08", "current"):
            context = construct_step(store, run_id=f"{run_id}-{arm}", instance_id="demo",
                                     task="t", steps=steps, tree=root, prefix=prefix, arm=arm)
            assert ("token_count_bounded" in context.flags) is bounded, (run_id, arm)


def test_a_step_of_another_history_under_a_run_it_already_holds_is_refused(store, tmp_path):
    """Two loops under one run id and instance would read each other's windows: the
    second history's step is refused by name, nothing written; the same request again (a
    harness asking anew) is recorded again, the same window."""
    root = _tree(tmp_path / "tree")
    mine, theirs = _filler(3), [LoopStep("python -m pytest -q", "1 passed in 0.02s\n")] * 3

    def step(steps, run_id="loop", instance_id="demo"):
        return construct_step(store, run_id=run_id, instance_id=instance_id, task="t",
                              steps=steps, tree=root, prefix=PREFIX, rules=RULES)

    first = [step(mine[:done]) for done in range(3)]
    again = step(mine[:2])  # the same request again
    assert again.render() == first[2].render() and again.decision_id != first[2].decision_id
    with store.engine.connect() as connection:
        held = connection.exec_driver_sql("SELECT COUNT(*) FROM decision").scalar()
    with pytest.raises(StepTakenError, match=r"^seq: the store already holds step 2 of run "
                       r"'loop' on instance 'demo' \(decision \d+\), built from another "
                       r"history; give each loop its own run_id"):
        step(theirs[:1])
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT COUNT(*) FROM decision").scalar() == held
    # the same steps after another prompt, or for another task: another history too
    for other in ({"prefix": [PREFIX[0], {"role": "user", "content": "Another task."}]},
                  {"task": "another"}):
        with pytest.raises(RequestError, match=r"^seq: the store already holds step 2"):
            construct_step(store, **{"run_id": "loop", "instance_id": "demo", "task": "t",
                                     "steps": mine[:1], "tree": root, "prefix": PREFIX,
                                     "rules": RULES, **other})
    step(theirs[:1], run_id="theirs")  # its own run: its own steps
    step(theirs[:1], instance_id="another")  # the run on another instance
    for field in ("run_id", "instance_id"):
        with pytest.raises(RequestError, match=rf"^{field}: expected at most 200 characters, "
                           r"got 201"):
            step([], **{field: "r" * 201})
    # a run id with a ':' would make the window's run:RUN:INSTANCE name two runs' parts
    # (runs exp and exp:django); an instance id may hold one
    with pytest.raises(RequestError, match=r"^run_id: expected no ':', got 'exp:django' \(a "
                       r"loop window names its run as run:RUN:INSTANCE"):
        step([], run_id="exp:django", instance_id="1")
    assert "run:exp:django:1 E<n>" in step(_filler(12), run_id="exp",
                                           instance_id="django:1").render()


def test_a_step_whose_history_does_not_go_on_from_the_run_s_last_is_refused(store, tmp_path):
    """A harness that sends an earlier step otherwise than it did, reorders its steps,
    changes the task or its prompt, or a second loop under the run id past the first's
    steps: refused by the field, nothing written; the history going on is recorded."""
    root = _tree(tmp_path / "tree")
    mine = _filler(4)

    def step(steps, **changes):
        return construct_step(store, **{"run_id": "loop", "instance_id": "demo", "task": "t",
                                        "steps": steps, "tree": root, "prefix": PREFIX,
                                        "rules": RULES, **changes})

    for done in range(3):
        step(mine[:done])
    with store.engine.connect() as connection:
        held = connection.exec_driver_sql("SELECT COUNT(*) FROM decision").scalar()
    edited = dataclasses.replace(mine[1], output="edited\n")
    for steps, changes, field, what in (
            ([mine[0], edited, mine[2]], {}, r"steps\[1\]", "step 2 otherwise than it was"),
            ([mine[1], mine[0], mine[2]], {}, r"steps\[0\]", "step 1 otherwise than it was"),
            (mine[:3], {"task": "another"}, "task", "another task"),
            (mine[:3], {"prefix": [PREFIX[0]]}, "prefix", "another harness prompt"),
            # the same texts rebuilt with their keys in another order: said so
            (mine[:3], {"prefix": [{"content": m["content"], "role": m["role"]}
                                   for m in PREFIX]}, "prefix", "another harness prompt: "
             "the same messages, their keys in another order")):
        with pytest.raises(StepTakenError, match=rf"^{field}: the store holds step 3 of run "
                           r"'loop' on instance 'demo' \(decision \d+\), built from a history "
                           rf"this step's does not continue \({what}\)"):
            step(steps, **changes)
    # step k is built from the k-1 steps before it: a seq saying otherwise is refused
    for steps, seq in ((mine[:1], 4), (mine[:3], 1), (mine[:3], 5)):
        with pytest.raises(RequestError, match=rf"^seq: expected {len(steps) + 1} \(the "
                           rf"step after the {len(steps)} given\), got {seq}"):
            step(steps, seq=seq)
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT COUNT(*) FROM decision").scalar() == held
    step(mine[:3], seq=4)  # the history going on
    # a second loop refused at a step the first took stays refused at the steps after it
    with pytest.raises(StepTakenError, match=r"^steps\[0\]: the store holds step 4"):
        step([LoopStep("ls", "a.py\n")] * 4)


def test_a_bare_fresh_output_says_it_was_empty_or_failed(tmp_path):
    """A harness that gives the output alone (no observation of its own, whose markup
    would say it): an empty output and a non-zero exit code are said, so grep finding
    nothing reads otherwise than a command that printed nothing and succeeded."""
    steps = [LoopStep("grep -n nothing pkg/mod.py", "", returncode=1),
             LoopStep("python -c 'assert True'", "  \n", returncode=0),
             LoopStep("python x.py", "boom", returncode=2),
             LoopStep("sleep 100", "", kind=ObservationKind.TIMEOUT, returncode=-9),
             # the harness's own observation says it; so does its feedback; a turn of
             # several commands says each of its outputs' under a line naming the command
             LoopStep("grep -n nothing pkg/mod.py", "", returncode=1,
                      observation="<returncode>1</returncode>\n<output>\n</output>"),
             LoopStep(None, "Reply with one command.", kind=ObservationKind.FORMAT_ERROR),
             LoopStep("ls\nfalse", "a.py\n", returncode=1,
                      actions=(LoopStep("ls", "a.py\n", returncode=0),
                               LoopStep("false", "", returncode=1)))]
    said = ["(no output)\n(exit 1)\n\n", "(no output)\n\n", "boom\n(exit 2)\n\n",
            "(timed out)\n\n", "<returncode>1</returncode>\n<output>\n</output>\n\n",
            "Reply with one command.\n\n",
            f"[E{item_numbers(7)[1]} from `ls`]\na.py\n[E{item_numbers(7)[1]} from `false`]\n"
            "(no output)\n(exit 1)\n\n"]
    for arm in ("ctx08", "current"):  # the arms see alike
        with ContextStore.open(tmp_path / f"{arm}.db") as store:
            window = construct_step(store, run_id=arm, instance_id="i", task="t",
                                    steps=steps, prefix=PREFIX, arm=arm, rules=RULES)
        assert [entry.text for entry in window.window
                if step_of_item(int(entry.item_id[1:]))[1] == OUTPUT_PART] == said, arm


def test_a_window_that_cannot_fit_is_recorded_as_the_messages_sent_instead(tmp_path):
    """``sent_if_over_ceiling``: the step is recorded as the harness's messages, flagged,
    never as a window sent with ctxdb's cache marks; it folds nothing, and `show` says so."""
    import dataclasses

    from ctxdb.config import load_settings

    root = _tree(tmp_path / "tree")
    steps = [LoopStep("cat pkg/other.py", "ALPHA = 1\nBETA = 2\n")]
    huge = [{"role": "system", "content": "rule " * 600}, PREFIX[1]]
    sent = [*huge, {"role": "assistant", "content": "```bash\ncat pkg/other.py\n```"},
            {"role": "user", "content": "ALPHA = 1\nBETA = 2\n"}]
    settings = dataclasses.replace(load_settings(), token_ceiling=400)
    with ContextStore.open(tmp_path / "s.db", settings=settings) as store:
        with pytest.raises(RequestError, match="over the ceiling 400"):  # not given: refused
            construct_step(store, run_id="r", instance_id="i", task="t", steps=steps,
                           tree=root, prefix=huge)
        context = construct_step(store, run_id="r", instance_id="i", task="t", steps=steps,
                                 tree=root, prefix=huge, cache_marks=True,
                                 sent_if_over_ceiling=sent)
        assert "harness_sent_over_ceiling" in context.flags
        assert "cache_marked" not in context.flags and context.token_count > 400
        assert store.messages_sent(context.decision_id) == sent
        # what the call gives to send is what was recorded, read back too, and marked
        # by ctxdb it is not (the harness marks its own messages)
        assert context.messages(prefix=huge) == context.messages() == sent
        assert store.context(context.decision_id).messages() == sent
        from ctxdb.agent.cache_marks import cache_marked_messages

        assert cache_marked_messages(context, huge) == sent

        with store.engine.connect() as connection:
            summary = forensics.summary(connection, context.decision_id)
        assert "no window fitted the ceiling, so the harness sent its own messages" in summary
        assert all("fold horizon" not in (row["detail"] or "")
                   for row in store.why(context.decision_id, "E2"))
        # messages that do not line up with the steps are named as the argument they came in
        with pytest.raises(SentMessagesError, match=r"^sent_if_over_ceiling\[2\]: no message "
                           "from here on holds step 1's observation"):
            construct_step(store, run_id="r2", instance_id="i", task="t", steps=steps,
                           tree=root, prefix=huge, sent_if_over_ceiling=sent[:3])
        with pytest.raises(RequestError, match="sent_if_over_ceiling: only a decision of arm "
                           "'ctx08'"):
            construct_step(store, run_id="c", instance_id="i", task="t", steps=steps,
                           tree=root, prefix=huge, arm="current", sent_if_over_ceiling=sent)
        assert store.verify() == {}


def test_a_wrong_fallback_is_refused_at_a_step_that_fits(tmp_path):
    """``sent_if_over_ceiling`` is checked at every step, not only at one that falls back:
    a harness passing the wrong value learns at its first step, and nothing is written."""
    root = _tree(tmp_path / "tree")
    steps = [LoopStep("cat pkg/other.py", "ALPHA = 1\nBETA = 2\n")]
    wrong = {"a string": "expected a list of chat messages, got str",
             "no prefix": r"sent_if_over_ceiling\[0\]: expected prefix\[0\]",
             "a bad message": r"sent_if_over_ceiling\[2\]: expected a chat message"}
    values = {"a string": "hello", "no prefix": [{"role": "user", "content": "x"}],
              "a bad message": [*PREFIX, {"role": "user", "content": 3}]}
    with ContextStore.open(tmp_path / "s.db") as store:
        for name, value in values.items():
            with pytest.raises(RequestError, match=wrong[name]) as refused:
                construct_step(store, run_id="r", instance_id="i", task="t", steps=steps,
                               tree=root, prefix=PREFIX, sent_if_over_ceiling=value)
            # a usage error, not the SentMessagesError of messages a fallback cannot read
            # (the mini-swe-agent wrapper would send such a step as the harness's own)
            assert type(refused.value) is RequestError
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT count(*) FROM decision").scalar() == 0
        context = construct_step(store, run_id="r", instance_id="i", task="t", steps=steps,
                                 tree=root, prefix=PREFIX,
                                 sent_if_over_ceiling=[*PREFIX, {"role": "user", "content": ""}])
        assert "harness_sent_over_ceiling" not in context.flags


def test_a_memo_remembers_what_it_read_none_too():
    """What a window reads of a long text is read once per text: a text that is no
    listing, or shows no lines (None), too, and remembering it again forgets nothing."""
    from ctxdb.agent.loop import _DigestMemo

    memo: _DigestMemo[int | None] = _DigestMemo(kept=2)
    reads: list[str] = []

    def read(name: str, value: int | None):
        return lambda: reads.append(name) or value

    assert memo.get("a", read("a", None)) is None and memo.get("a", read("a", 1)) is None
    assert memo.get("b", read("b", 2)) == 2 and memo.get("b", read("b", 3)) == 2
    memo.keep("b", 2)  # kept again: "a" stays
    assert memo.get("a", read("a", 4)) is None
    assert reads == ["a", "b"]


def test_a_window_built_without_the_tree_says_so(store, tmp_path):
    """Without ``tree`` no output folds to the lines it printed: the decision says why
    (a harness developer's cold trial found every view a pointer and nothing saying so)."""
    root = _tree(tmp_path / "tree")
    steps = [LoopStep("nl -ba pkg/mod.py | sed -n '3,6p'", _nl(3, 6)), *_filler(8)]
    blind = construct_step(store, run_id="blind", instance_id="i", task="t", steps=steps,
                           rules=RULES)
    seen = construct_step(store, run_id="seen", instance_id="i", task="t", steps=steps,
                          tree=root, rules=RULES)
    current = construct_step(store, run_id="cur", instance_id="i", task="t", steps=steps,
                             arm="current")
    assert "tree_not_given" in blind.flags
    assert "tree_not_given" not in seen.flags and "tree_not_given" not in current.flags
    assert "\n3\tdef function_2(value):" not in store.show(blind.decision_id)  # a pointer
    assert "\n3\tdef function_2(value):" in store.show(seen.decision_id)  # a view
