"""ctxdb.agent.anchors: what an agent's next action took from earlier observations, and
whether a window kept it — on hand-written commands shaped like the recorded runs'."""

import pytest

from ctxdb.agent.anchors import (
    Anchor,
    AnchorClass,
    WindowIndex,
    anchor_kept,
    anchors_of_action,
    is_edit_command,
    observations_holding,
    shell_commands,
)

EDIT, LINE, IDENTIFIER, PATH = (AnchorClass.EDIT, AnchorClass.LINE, AnchorClass.IDENTIFIER,
                                AnchorClass.PATH)
SYSTEM_PROMPT = "You are a helpful assistant that can interact with a computer shell."
TASK = "<pr_description>\nQuantity.to_string ignores the precision argument.\n</pr_description>"


def anchors(command, observations=("",), task=TASK):
    return anchors_of_action(command, earlier_observations=list(observations),
                             system_prompt=SYSTEM_PROMPT, task=task)


def texts(command, anchor_class, observations=("",), task=TASK):
    return [a.text for a in anchors(command, observations, task) if a.anchor_class is anchor_class]


# --------------------------------------------------------------------------- sed OLD

def test_sed_old_with_pipe_delimiters_is_the_literal_text():
    command = ("sed -i 's|return self._unit.to_string()|return self.unit.to_string(fmt)|' "
               "astropy/units/quantity.py")
    [anchor] = [a for a in anchors(command) if a.anchor_class is EDIT]
    assert anchor == Anchor(EDIT, "return self._unit.to_string()", path="astropy/units/quantity.py")


def test_sed_old_is_de_escaped():
    command = (r"sed -i 's/x\/(y + 1)\*\*2 in \[a\]/z/' pkg/mod.py && "
               r"sed -i 's|a\|b = 10|c|' pkg/mod.py && "
               r"sed -i 's/return \"%s\\\\dagger\%s\"/x/' pkg/mod.py")
    assert texts(command, EDIT) == ["x/(y + 1)**2 in [a]", "a|b = 10", 'return "%s\\\\dagger%s"']


def test_sed_old_in_double_quotes_loses_the_shell_escapes_first():
    command = r'''sed -i "s/raise ValueError(\"bad\")/pass/" pkg/mod.py'''
    assert texts(command, EDIT) == ['raise ValueError("bad")']


@pytest.mark.parametrize("pattern", [
    r"foo.*bar", r"^def to_string", r"to_string(self)$", r"isinstance(args[0], Table)", r"\(self\)",
    r"value\+1", r"value\1", r"first\nsecond", r"to_string\w",
])
def test_a_sed_old_that_is_still_a_regex_is_skipped(pattern):
    assert texts(f"sed -i 's/{pattern}/x/' pkg/mod.py", EDIT) == []


def test_extended_sed_reads_unescaped_groups_as_regex_and_escaped_ones_as_text():
    assert texts("sed -E -i 's/f(x) + 1/y/' pkg/mod.py", EDIT) == []
    assert texts(r"sed -E -i 's/f\(x\) \+ 1/y/' pkg/mod.py", EDIT) == ["f(x) + 1"]


def test_a_lone_dot_is_the_character_the_agent_meant():
    assert texts("sed -i 's/self.data = data/x/' pkg/mod.py", EDIT) == ["self.data = data"]


def test_a_short_sed_old_is_skipped():
    assert texts("sed -i 's/Perm/cls/' pkg/perm.py", EDIT) == []
    assert texts("sed -i 's/Perms_/cls/' pkg/perm.py", EDIT) == ["Perms_"]


def test_a_regex_address_of_a_delete_is_the_text_it_removes():
    command = "sed -i '/def as_set(self):/,/raise NotImplementedError()/d' pkg/sets.py"
    assert texts(command, EDIT) == ["def as_set(self):", "raise NotImplementedError()"]
    # an insertion only finds its place by the address: nothing is replaced
    assert texts("sed -i '/def as_set(self):/i \\    x = 1' pkg/sets.py", EDIT) == []


def test_sed_without_in_place_edits_nothing():
    command = "sed -n 's/return self._unit/x/p' pkg/mod.py"
    assert texts(command, EDIT) == [] and texts(command, LINE) == []
    assert not is_edit_command(command)


# -------------------------------------------------------------------------- sed lines

def line_anchors(command):
    return [(a.path, a.line) for a in anchors(command) if a.anchor_class is LINE]


def test_line_addressed_sed_edits_give_every_addressed_line():
    assert line_anchors("sed -i '120d' pkg/mod.py") == [("pkg/mod.py", 120)]
    assert line_anchors("sed -i '100,103c\\    pass' pkg/mod.py") == [
        ("pkg/mod.py", 100), ("pkg/mod.py", 101), ("pkg/mod.py", 102), ("pkg/mod.py", 103)]
    assert line_anchors("sed -i '5a\\    x = 1\\n    y = 2' pkg/mod.py") == [("pkg/mod.py", 5)]
    assert line_anchors("sed -i '7i\\\n    x = 1\\\n    y = 2' pkg/mod.py") == [("pkg/mod.py", 7)]
    assert line_anchors("sed -i '10,+1d' pkg/mod.py") == [("pkg/mod.py", 10), ("pkg/mod.py", 11)]


def test_several_expressions_and_commands_of_one_script():
    command = "sed -i -e '12d' -e '20a\\    pass' /testbed/pkg/mod.py && sed -i '3d;9d' ./pkg/b.py"
    assert line_anchors(command) == [("pkg/mod.py", 12), ("pkg/mod.py", 20),
                                     ("pkg/b.py", 3), ("pkg/b.py", 9)]
    [anchor] = [a for a in anchors(command) if a.line == 12]
    assert anchor == Anchor(LINE, "pkg/mod.py:12", path="pkg/mod.py", line=12)


def test_a_numbered_substitution_is_a_line_anchor_only_when_its_old_is_not_usable():
    assert line_anchors("sed -i '175s/.*/    x = 1/' pkg/mod.py") == [("pkg/mod.py", 175)]
    assert line_anchors("sed -i '947s/Perm/cls/' pkg/perm.py") == [("pkg/perm.py", 947)]
    command = "sed -i '720s/NdarrayMixin/Column/' pkg/mixin.py"
    assert line_anchors(command) == [] and texts(command, EDIT) == ["NdarrayMixin"]


def test_the_file_follows_a_cd():
    assert line_anchors("cd pkg && sed -i '4d' mod.py") == [("pkg/mod.py", 4)]


# ----------------------------------------------------------------------- python edits

HEREDOC_EDIT = """python3 - <<'EOF'
path = 'pkg/units/quantity.py'
with open(path) as f:
    content = f.read()
content = content.replace("return self._unit.to_string()", "return self.unit.to_string(fmt)")
content = content.replace(f"{prefix}value", "x")
with open(path, 'w') as f:
    f.write(content)
EOF"""


def test_a_heredoc_python_edit_anchors_its_literal_replace_argument():
    edits = [a for a in anchors(HEREDOC_EDIT) if a.anchor_class is EDIT]
    # the f-string's text is not known: it gives nothing
    assert edits == [Anchor(EDIT, "return self._unit.to_string()", path="pkg/units/quantity.py")]
    assert is_edit_command(HEREDOC_EDIT)


def test_a_python_c_edit():
    command = ("""python -c "p='pkg/mod.py'; s=open(p).read(); """
               """open(p, 'w').write(s.replace('old_value = 1', 'old_value = 2'))" """)
    assert texts(command, EDIT) == ["old_value = 1"]
    assert is_edit_command(command)


MULTI_LINE_EDIT = """cat <<'EOF' > fix.py
with open('pkg/rings.py') as f:
    content = f.read()
old_block = '''        if symbols and len(symbols) != self.ngens:
            raise ValueError("not enough symbols")

        else:
            symbols = self.symbols'''
content = content.replace(old_block, NEW)
open('pkg/rings.py', 'w').write(content)
EOF
python fix.py"""


def test_a_multi_line_old_counts_by_its_non_blank_lines():
    assert texts(MULTI_LINE_EDIT, EDIT) == [
        "if symbols and len(symbols) != self.ngens:", 'raise ValueError("not enough symbols")',
        "else:", "symbols = self.symbols"]


def test_a_script_written_now_and_run_later_is_this_actions_edit():
    written_only = MULTI_LINE_EDIT.rsplit("\npython fix.py", 1)[0]
    assert len(texts(written_only, EDIT)) == 4
    assert is_edit_command(written_only)


def test_a_name_bound_twice_is_a_variable_not_a_literal():
    command = MULTI_LINE_EDIT.replace("content = content.replace",
                                      "old_block = old_block.strip()\ncontent = content.replace")
    assert texts(command, EDIT) == []


def test_replace_in_a_script_that_writes_no_repository_file_is_no_edit():
    command = """python - <<'EOF'
text = open('pkg/mod.py').read()
print(text.replace("return self._unit", "X"))
open('out.txt', 'w').write(text)
EOF"""
    assert texts(command, EDIT) == []
    assert not is_edit_command(command)


def test_a_python_edit_by_line_index_gives_line_anchors():
    command = """python3 <<'EOF'
start = 217
with open('pkg/sets.py') as f:
    lines = f.readlines()
lines[start:start + 2] = ['    pass\\n']
lines[798] = '    return x\\n'
lines.insert(40, '    import os\\n')
del lines[5]
open('pkg/sets.py', 'w').writelines(lines)
EOF"""
    assert sorted(line_anchors(command)) == [("pkg/sets.py", n) for n in (6, 41, 218, 219, 799)]


def test_an_unquoted_heredoc_is_read_as_the_shell_passes_it():
    command = ('python3 <<EOF\ns = open("pkg/m.py").read().replace("a\\\\tb = 1", "x")\n'
               'open("pkg/m.py", "w").write(s)\nEOF')
    assert texts(command, EDIT) == ["a\tb = 1"]


# ------------------------------------------------------------------------ identifiers

OBSERVATION = """<returncode>0</returncode>
<output>
pkg/units/quantity.py:1203:    def to_string(self, unit=None, precision=None):
pkg/units/quantity.py:1250:        formatted = _format_value(value, precision)
</output>"""


def test_identifiers_are_command_words_seen_in_an_earlier_observation():
    command = "grep -n '_format_value' pkg/units/quantity.py && grep -n 'never_seen_name' pkg/x.py"
    assert texts(command, IDENTIFIER, [OBSERVATION]) == ["_format_value"]
    # whole words only: _format_value is not in "_format_values"
    assert texts("grep -n '_format_values' pkg/a.py", IDENTIFIER, [OBSERVATION]) == []


def test_identifiers_the_task_or_prompt_already_gave_are_not_anchors():
    command = "grep -n 'precision' pkg/units/quantity.py"
    assert texts(command, IDENTIFIER, [OBSERVATION]) == []  # the task says "precision"
    assert texts(command, IDENTIFIER, [OBSERVATION], task="Quantity is broken") == ["precision"]
    observation = "computer interact output"
    assert texts("echo computer interact", IDENTIFIER, [observation]) == []  # the system prompt's


def test_keywords_builtins_and_shell_words_are_not_identifiers():
    observation = "None return print import self grep python3 testbed EOF unit precision"
    command = ("cd /testbed && grep -rn unit . | head && python3 -c 'import os; print(None)' "
               "&& python3 <<'EOF'\ndef f(self):\n    return unit\nEOF")
    assert texts(command, IDENTIFIER, [observation], task="x") == ["unit"]


def test_options_paths_and_comments_give_no_identifiers():
    observation = "include name core basic because"
    command = ("find pkg/core/basic.py -name x.py && grep --include=basic.py -rn x . "
               "&& python3 <<'EOF'\n# because\nx = 1  # because\nEOF")
    assert texts(command, IDENTIFIER, [observation], task="x") == []


# ------------------------------------------------------------------------------ paths

def test_paths_are_normalized_from_the_root_and_dot():
    observation = "pkg/units/quantity.py\n/testbed/pkg/units/core.py:12: in f"
    command = ("nl -ba /testbed/pkg/units/quantity.py && cat ./pkg/units/core.py "
               "&& ls pkg/units/ && cat pkg/never_seen.py")
    assert texts(command, PATH, [observation], task="x") == [
        "pkg/units/quantity.py", "pkg/units/core.py", "pkg/units"]


def test_paths_the_task_names_are_not_anchors():
    observation = "pkg/units/quantity.py"
    task = "The bug is in /testbed/pkg/units/quantity.py"
    assert texts("cat pkg/units/quantity.py", PATH, [observation], task=task) == []


def test_attribute_access_and_arithmetic_are_not_paths():
    observation = "self.data x/y reproduce.py"
    command = "python3 -c 'print(self.data, x/y)' && python reproduce.py"
    assert texts(command, PATH, [observation], task="x") == ["reproduce.py"]


def test_a_path_is_kept_in_any_spelling_and_a_directory_by_a_file_under_it():
    path, directory = Anchor(PATH, "pkg/units/quantity.py"), Anchor(PATH, "pkg/units")
    assert anchor_kept(path, "File \"/testbed/pkg/units/quantity.py\", line 3")
    assert anchor_kept(path, "--- a/pkg/units/quantity.py\n+++ b/pkg/units/quantity.py")
    assert anchor_kept(directory, "see ./pkg/units/quantity.py.")
    assert not anchor_kept(path, "pkg/units/quantity.pyc other/pkg/units/quantity.py")


# ----------------------------------------------------------------- kept in the window

def test_edit_text_is_kept_with_whitespace_collapsed_on_both_sides():
    anchor = Anchor(EDIT, "if symbols and  len(symbols)  != self.ngens:")
    assert anchor_kept(anchor, "  1120\t        if symbols and len(symbols)\t!= self.ngens:\n")
    assert not anchor_kept(anchor, "if symbols and len(symbols) == self.ngens:")


def test_an_escaped_sed_pattern_is_kept_where_the_window_spells_it_as_the_command_did():
    # sphinx-9258: the agent reverted a test file and redid the sed edit its window shows
    # as it wrote it; the text it replaces was printed only by a test run since folded
    command = (r"""sed -i 's/addnodes.literal_emphasis, "\["/addnodes.punct, "["/g' """
               "tests/test_domain_py.py")
    [anchor] = [a for a in anchors(command) if a.anchor_class is EDIT]
    assert anchor.text == 'addnodes.literal_emphasis, "["'
    assert anchor.spelled == r'addnodes.literal_emphasis, "\["'
    assert anchor_kept(anchor, "[step 99] $ " + command)
    assert anchor_kept(anchor, '[pending_xref, addnodes.literal_emphasis, "["],')
    assert not anchor_kept(anchor, "[step 99] $ sed -i 's/addnodes.literal_emphasis/x/' f.py")
    # a pattern without escapes has no other spelling
    [plain] = [a for a in anchors("sed -i 's/return total/return 0/' pkg/mod.py")
               if a.anchor_class is EDIT]
    assert plain.spelled is None


def test_identifiers_are_kept_as_whole_words():
    anchor = Anchor(IDENTIFIER, "_format_value")
    assert anchor_kept(anchor, "x = _format_value(v)")
    assert not anchor_kept(anchor, "x = _format_values(v)")


def test_the_harness_markup_is_not_window_text():
    assert not anchor_kept(Anchor(IDENTIFIER, "output"),
                           "<returncode>0</returncode>\n<output>\n</output>")
    assert anchor_kept(Anchor(IDENTIFIER, "output"), "<output>\noutput = 3\n</output>")


FILE_LINES = {"pkg/mod.py": [f"line {n}" for n in range(1, 200)],
              "pkg/other.py": [f"line {n}" for n in range(1, 200)]}
ANCHOR_120 = Anchor(LINE, "pkg/mod.py:120", path="pkg/mod.py", line=120)


def kept_120(window):
    return anchor_kept(ANCHOR_120, window, file_lines=FILE_LINES)


@pytest.mark.parametrize("window", [
    "```bash\nnl -ba pkg/mod.py | sed -n '118,122p'\n```\n"
    "<output>\n   119\tline 119\n   120\tline 120\n</output>",
    "grep -n 'line' /testbed/pkg/mod.py\n<output>\n120:line 120\n</output>",
    "grep -rn line pkg/\n<output>\npkg/mod.py:120:line 120\npkg/other.py-121-line 121\n</output>",
    "cat -n pkg/mod.py | grep -n 'line 120'\n3:   120\tline 120",
    "cd pkg && nl -ba mod.py\n   120\t  line   120",
])
def test_a_line_is_kept_when_its_number_and_text_sit_together_for_its_file(window):
    assert kept_120(window)


@pytest.mark.parametrize("window", [
    # another file's listing
    "nl -ba pkg/other.py\n   120\tline 120",
    "grep -rn line pkg/\npkg/other.py:120:line 120",
    # the number beside other text (the listing is older than an edit)
    "nl -ba pkg/mod.py\n   120\tline 119",
    # the number and the text on different lines
    "nl -ba pkg/mod.py\n   120\t\nline 120",
    "sed -n '120p' pkg/mod.py\nline 120",
    # a listing that names no file
    "   120\tline 120",
])
def test_a_line_is_not_kept_otherwise(window):
    assert not kept_120(window)


def test_the_files_lines_come_from_a_callable_or_a_mapping():
    window = "nl -ba pkg/mod.py\n   120\tline 120"
    assert anchor_kept(ANCHOR_120, window, file_lines=FILE_LINES.get)
    assert not anchor_kept(ANCHOR_120, window, file_lines={"pkg/mod.py": ["x"] * 200})
    assert not anchor_kept(ANCHOR_120, window, file_lines={"pkg/mod.py": ["x"] * 100})


def test_without_the_files_lines_the_number_in_a_listing_of_the_file_is_checked():
    assert anchor_kept(ANCHOR_120, "nl -ba pkg/mod.py\n   120\tanything")
    assert not anchor_kept(ANCHOR_120, "nl -ba pkg/other.py\n   120\tanything")


def test_window_index_answers_like_anchor_kept():
    window = WindowIndex("nl -ba pkg/mod.py\n   120\tline 120\nx = _format_value(v)")
    assert window.keeps(ANCHOR_120, file_lines=FILE_LINES)
    assert window.keeps(Anchor(IDENTIFIER, "_format_value"))
    assert not window.keeps(Anchor(EDIT, "_format_value(w)"))


# ----------------------------------------------------------------------- observations

def test_observations_holding_lists_every_observation_that_holds_the_anchor():
    observations = ["nothing here", "x = _format_value(v)", "<output>\n   120\tline 120\n</output>",
                    "y = _format_value"]
    assert observations_holding(Anchor(IDENTIFIER, "_format_value"), observations) == [1, 3]
    # an observation is output without its command: a listing naming no file counts
    assert observations_holding(ANCHOR_120, observations, file_lines=FILE_LINES) == [2]


# ----------------------------------------------------------------------- edit actions

@pytest.mark.parametrize("command", [
    "sed -i 's/a = 1/a = 2/' pkg/mod.py",
    "sed -i.bak '3d' /testbed/pkg/mod.py",
    "perl -pi -e 's/a/b/' pkg/mod.py",
    "cat <<'EOF' > pkg/tests/test_new.py\ndef test(): pass\nEOF",
    "cat >> pkg/tests/test_mod.py <<'EOF'\ndef test(): pass\nEOF",
    "echo 'x = 1' >> pkg/mod.py",
    "mv pkg/mod.py.new pkg/mod.py",
    "patch pkg/mod.py fix.patch",
    "git apply fix.diff",
    HEREDOC_EDIT,
])
def test_edit_commands(command):
    assert is_edit_command(command)


@pytest.mark.parametrize("command", [
    "nl -ba pkg/mod.py | sed -n '10,20p'",
    "grep -rn 'to_string' pkg/ > /tmp/hits.txt",
    "cat <<'EOF' > reproduce.py\nprint(1)\nEOF\npython reproduce.py",
    "sed -i 's/a = 1/a = 2/' reproduce.py",
    "cp pkg/mod.py pkg/mod.py.bak",
    "git checkout pkg/mod.py",
    "git apply --check fix.diff",
    "git diff > fix.diff",
])
def test_commands_that_edit_no_repository_file(command):
    assert not is_edit_command(command)


def test_the_caller_may_judge_which_files_belong_to_the_repository():
    command = "sed -i 's/a = 1/a = 2/' setup.py"
    assert not is_edit_command(command)
    assert is_edit_command(command, is_repository_file=lambda path: path == "setup.py")


def test_anchors_are_de_duplicated_per_decision():
    command = "sed -i 's/return value_x/x/' pkg/a.py && sed -i 's/return value_x/y/' pkg/a.py"
    assert texts(command, EDIT) == ["return value_x"]


def test_the_shell_reader_takes_any_text():
    """The loop reads every command with it and does not guard the call: it never raises,
    whatever quotes, here-documents, substitutions or escapes are left open."""
    import random

    pieces = ["cat", " ", "'", '"', "\\", "$(", ")", "`", "<<", "<<-", "'EOF'", "EOF", "\n",
              ";", "&&", "||", "|", ">", ">>", "2>&1", "<", "(", "{", "}", "#", "$", "=",
              "sed -i", "-n", "x.py", "/testbed/", "cd", "\t", "\x00", "é", "<<<", "&"]
    rng = random.Random(11)
    for _ in range(5000):
        command = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
        shell_commands(command)
        is_edit_command(command)
