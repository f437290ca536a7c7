"""What an agent's next action took from earlier observations: its anchors (issue 20).

A recorded run of a bash-only agent (mini-swe-agent: one shell command per step) is
replayed decision by decision. At decision k the harness sent the whole history; a
context constructor sends a window instead. The window is judged by the *anchors* of
action k — things the agent's command took from what it had seen — and whether the
window still held them. Anchors come from the command text alone, in four classes:

``EDIT`` (``edit_text``)
    The exact text an edit replaces: ``OLD`` of ``sed -i 's<d>OLD<d>NEW<d>' FILE`` (any
    delimiter; de-escaped to a literal, skipped when it is still a regular expression
    or shorter than ``MIN_SED_TEXT_CHARS``), and the first argument of ``.replace(OLD,
    NEW)`` in a Python edit of a repository file, when it is a plain string literal —
    or a name the script binds once to one (``old = '''...'''`` then
    ``content.replace(old, new)`` is how the recorded agents write it). Also the text
    of a ``/regex/`` address of a sed ``d`` or ``c`` command: those lines are the text
    the edit replaces. A multi-line text gives one anchor per non-blank line, stripped.
    Kept when it occurs in the window, whitespace runs collapsed on both sides — or, for
    a sed pattern with escapes, when the pattern as written does (``"\\["`` for
    ``"["``): an agent redoing an edit its window shows copies the pattern from there
    (read after the shell's quoting: a double-quoted ``\\\\.`` is spelled ``\\.``, which
    the window does not show, so such an edit is measured as before).

``LINE`` (``edit_line``)
    Line N of FILE, for an edit addressed by line number whose text did not locate it:
    ``sed -i '120d'``, ``'120a\\...'``, ``'120i\\...'``, ``'100,110c\\...'``,
    ``'1137r other.py'``, and ``'175s/.*/.../'`` or ``'947s/Perm/cls/'`` — a numbered
    ``s`` whose ``OLD`` gave no ``EDIT`` anchor (a pattern, or too short), so only the
    number placed it. One anchor per addressed line (every line of a range; for ``a``
    the line itself). The same for a Python edit of one repository file through its
    list of lines by index the script spells out (``lines[217:220] = ...`` is lines
    218-220; ``lines.insert(40, x)`` and ``lines[40:40] = ...`` are line 41; ``del
    lines[5]``). Kept when the window shows that number beside that line's text in a
    numbered listing about that file (``WindowIndex`` says how).

``IDENTIFIER``
    Words ``[A-Za-z_]\\w{3,}`` of the command that occur as whole words in an earlier
    observation but in neither the system prompt nor the task, minus Python keywords,
    builtins, ``self``/``cls`` and ``COMMON_SHELL_WORDS``. The words are read from the
    command's arguments and heredocs, not from its tool names, options, paths,
    redirection targets or comments (``_identifier_text`` says why). Kept when the
    window holds it as a whole word.

``PATH``
    Repository paths among the command's shell words and its Python scripts' string
    literals — relative with a ``/`` or a known file extension, or absolute under
    ``/testbed``; ``/testbed/x/y.py`` and ``./x/y.py`` are both ``x/y.py`` — that occur
    in an earlier observation and not in the task. Kept when the window shows the path
    in any of its spellings (``/testbed/…``, ``./…``, a git diff's ``a/…``/``b/…``), or a
    file under it for a directory.

Anchors are de-duplicated per decision by (class, text). Only the standard library is
used: the module stands alone.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import posixpath
import re
import tokenize
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property, lru_cache
from typing import NamedTuple

from .trajectory import DEFAULT_WORKDIR

__all__ = [
    "Anchor",
    "AnchorClass",
    "COMMON_SHELL_WORDS",
    "FileLines",
    "MIN_SED_TEXT_CHARS",
    "WindowIndex",
    "anchor_kept",
    "anchors_of_action",
    "is_edit_command",
    "names_in",
    "observations_holding",
    "shell_commands",
]


class AnchorClass(StrEnum):
    EDIT = "edit_text"
    LINE = "edit_line"
    IDENTIFIER = "identifier"
    PATH = "path"


@dataclass(frozen=True)
class Anchor:
    """``text``: the literal for EDIT, the word for IDENTIFIER, the repository-relative
    path for PATH, ``"path:N"`` for LINE. ``path``: the edited file (EDIT when known,
    LINE always); ``line``: the 1-based line number (LINE). ``spelled``: for EDIT, the
    text as the command wrote it, when that differs from the literal (a sed pattern's
    escapes: ``"\\["`` for ``"["``)."""

    anchor_class: AnchorClass
    text: str
    path: str | None = None
    line: int | None = None
    spelled: str | None = None

    def __post_init__(self) -> None:
        # an anchor read back from a table carries its class as the stored string
        object.__setattr__(self, "anchor_class", AnchorClass(self.anchor_class))


# A file's lines at the decision (before the action ran), by repository-relative path;
# None when the file is unknown. A mapping path -> lines is accepted as well.
FileLines = Callable[[str], Sequence[str] | None] | Mapping[str, Sequence[str]]

# A sed OLD shorter than this is found in almost any window, so it would count as kept
# without telling anything (the rule).
MIN_SED_TEXT_CHARS = 6

# The agent's working directory in the recorded runs: /testbed/x/y.py is x/y.py.
REPOSITORY_ROOT = DEFAULT_WORKDIR

# Words a command shares with its observations for reasons of the shell, not of the
# code: the harness's own words (the repository root, the heredoc marker), shell syntax,
# and the everyday tools whose names come back in their own output and error lines. A
# Python keyword or builtin (print, import, open, ...) is already excluded separately.
# Kept short on purpose: it must hold for repositories these runs do not cover.
COMMON_SHELL_WORDS = frozenset({
    "testbed", "EOF",
    "then", "else", "elif", "done", "esac", "until", "echo", "printf", "export", "source",
    "exit", "true", "false", "test", "null",
    "bash", "grep", "egrep", "find", "xargs", "head", "tail", "sort", "uniq", "diff",
    "patch", "touch", "mkdir", "chmod", "python", "python3", "pytest", "pip",
})

# mini-swe-agent wraps every observation in these tags; their names are markup, not
# something the command could have taken from the output.
HARNESS_MARKUP_TAGS = ("returncode", "output", "output_head", "output_tail", "warning",
                       "elided_chars")

# What makes a token without a "/" a file name rather than an attribute (self.data):
# an extension of source, documentation, configuration or data files.
FILE_EXTENSIONS = frozenset({
    "py", "pyi", "pyx", "pxd", "pxi", "c", "h", "cc", "cpp", "hpp", "cxx", "f", "f90",
    "js", "ts", "jsx", "tsx", "java", "go", "rs", "rb", "pl", "sh",
    "rst", "md", "txt", "cfg", "ini", "toml", "yaml", "yml", "json", "xml", "html", "css",
    "in", "csv", "dat", "fits", "hdf5", "h5", "ecsv", "vot", "lock", "patch", "diff",
})
# Extensions too short to tell a file from an attribute when there is no "/" (a.c, s.h).
AMBIGUOUS_BARE_EXTENSIONS = frozenset({"c", "h", "f", "in"})
# Written beside a source file while editing it; never the edited file itself.
BACKUP_SUFFIXES = (".bak", ".orig", ".new", ".tmp", ".old", ".rej", ".swp", "~")

_IDENTIFIER = re.compile(r"(?<!\w)[A-Za-z_]\w{3,}")
_WORD = re.compile(r"\w+")
_PATH_CHARS = re.compile(r"[\w./-]+")
_MARKUP = re.compile(r"</?(?:{})>".format("|".join(HARNESS_MARKUP_TAGS)))
_PYTHON_EXECUTABLE = re.compile(r"^python(?:\d+(?:\.\d+)*)?$")
_SHELL_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
# As good as keywords: every method of every Python repository names them.
PYTHON_CONVENTIONAL_NAMES = frozenset({"self", "cls"})
_NOT_IDENTIFIERS = (frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
                    | frozenset(dir(builtins)) | PYTHON_CONVENTIONAL_NAMES | COMMON_SHELL_WORDS)


def names_in(text: str) -> list[str]:
    """The words of ``text`` an IDENTIFIER anchor can be, in order (repeats kept): four or
    more word characters, not a Python keyword, builtin, ``self``/``cls`` or a common shell
    word."""
    return [word for word in _IDENTIFIER.findall(text) if word not in _NOT_IDENTIFIERS]


# --------------------------------------------------------------------------- the shell

@dataclass
class _SimpleCommand:
    """One command of a shell line: its words after quote removal, what it reads on
    stdin from heredocs, its redirections, and the directory it runs in (relative to
    the repository root; absolute when outside it)."""

    words: list[str] = field(default_factory=list)
    heredocs: list[str] = field(default_factory=list)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    cwd: str = ""

    @property
    def name(self) -> str:
        return posixpath.basename(self.words[0]) if self.words else ""

    def output_files(self) -> list[str]:
        return [target for op, target in self.redirects if op in (">", ">>", ">|", "&>", "&>>")]


_REDIRECT_OPERATORS = ("&>>", "<<<", "<<-", ">>", "<<", ">|", "<>", ">&", "<&", "&>", ">", "<")
_COMMAND_SEPARATORS = frozenset(";&|()\n")
# Words before the command proper that do not change what it is.
_COMMAND_PREFIX_WORDS = frozenset({"!", "{", "}", "(", ")", "then", "do", "else", "elif",
                                   "if", "while", "until", "time", "nohup", "exec",
                                   "command", "builtin", "sudo", "env"})


def _balanced_end(text: str, start: int, opening: str, closing: str) -> int:
    """Index just past the bracket closing the one at ``start``, skipping quotes."""
    depth = 0
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "'":
            close = text.find("'", i + 1)
            i = len(text) if close < 0 else close + 1
            continue
        if char == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _unescape_unquoted_heredoc(body: str) -> str:
    # An unquoted delimiter lets the shell read \\, \$, \` and a line continuation in
    # the body (variables stay as written: their values are not known here).
    return re.sub(r"\\([\\$`])|\\\n", lambda m: m.group(1) or "", body)


def _decode_ansi_c(text: str) -> str:
    try:
        with warnings.catch_warnings():
            # an escape bash keeps as written (``\|``) is kept so too, which the codec warns of
            warnings.simplefilter("ignore", DeprecationWarning)
            return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return text


def _shell_commands(text: str) -> list[_SimpleCommand]:
    """The simple commands of a shell line, in order, with their heredoc bodies.

    A small lexer, not a shell: quotes, escapes, comments, ``$(...)``, heredocs and
    redirections are read as bash reads them; expansions are left as written."""
    commands: list[_SimpleCommand] = []
    current = _SimpleCommand()
    word: list[str] | None = None
    word_quoted = False
    pending_redirect: str | None = None
    pending_heredocs: list[tuple[_SimpleCommand, str, bool, bool]] = []
    i, n = 0, len(text)

    def end_word() -> None:
        nonlocal word, word_quoted, pending_redirect
        if word is None:
            return
        value = "".join(word)
        if pending_redirect in ("<<", "<<-"):
            pending_heredocs.append((current, value, word_quoted, pending_redirect == "<<-"))
        elif pending_redirect == "<<<":
            current.heredocs.append(value)
        elif pending_redirect:
            current.redirects.append((pending_redirect, value))
        else:
            current.words.append(value)
        word, word_quoted, pending_redirect = None, False, None

    def add_to_word(piece: str, *, quoted: bool = False) -> None:
        nonlocal word, word_quoted
        if word is None:
            word = []
        word.append(piece)
        word_quoted |= quoted

    def end_command() -> None:
        nonlocal current
        end_word()
        if current.words or current.heredocs or current.redirects:
            commands.append(current)
        current = _SimpleCommand()

    def read_heredocs(position: int) -> int:
        for owner, delimiter, quoted, strip_tabs in pending_heredocs:
            body: list[str] = []
            while position < n:
                line_end = text.find("\n", position)
                line_end = n if line_end < 0 else line_end
                line = text[position:line_end]
                position = line_end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                body.append(line + "\n")
            document = "".join(body)
            owner.heredocs.append(document if quoted else _unescape_unquoted_heredoc(document))
        pending_heredocs.clear()
        return position

    while i < n:
        char = text[i]
        if char == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                i += 2  # a line continuation joins the lines
                continue
            add_to_word(text[i + 1] if i + 1 < n else "", quoted=True)
            i += 2
            continue
        if char == "'":
            close = text.find("'", i + 1)
            close = n if close < 0 else close
            add_to_word(text[i + 1:close], quoted=True)
            i = close + 1
            continue
        if char == "$" and text.startswith("$'", i):
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            add_to_word(_decode_ansi_c(text[i + 2:j]), quoted=True)
            i = j + 1
            continue
        if char == '"':
            j = i + 1
            parts: list[str] = []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    follower = text[j + 1]
                    if follower in '$`"\\':
                        parts.append(follower)
                    elif follower != "\n":
                        parts.append("\\" + follower)
                    j += 2
                elif text.startswith("$(", j):
                    end = _balanced_end(text, j + 1, "(", ")")
                    parts.append(text[j:end])
                    j = end
                else:
                    parts.append(text[j])
                    j += 1
            add_to_word("".join(parts), quoted=True)
            i = j + 1
            continue
        if char == "$" and i + 1 < n and text[i + 1] in "({":
            opening, closing = ("(", ")") if text[i + 1] == "(" else ("{", "}")
            end = _balanced_end(text, i + 1, opening, closing)
            add_to_word(text[i:end])
            i = end
            continue
        if char == "`":
            close = text.find("`", i + 1)
            close = n if close < 0 else close
            add_to_word(text[i:close + 1])
            i = close + 1
            continue
        if char == "#" and word is None:
            line_end = text.find("\n", i)
            i = n if line_end < 0 else line_end
            continue
        if char in "<>" or (char == "&" and text.startswith(("&>", "&>>"), i)):
            if word is not None and not word_quoted and "".join(word).isdigit():
                word = None  # a file descriptor number: 2>&1, 2>/dev/null
            end_word()
            operator = next(op for op in _REDIRECT_OPERATORS if text.startswith(op, i))
            pending_redirect = operator
            i += len(operator)
            continue
        if char in " \t":
            end_word()
            i += 1
            continue
        if char in _COMMAND_SEPARATORS:
            end_command()
            i += 1
            if char == "\n" and pending_heredocs:
                i = read_heredocs(i)
            continue
        add_to_word(char)
        i += 1
    end_command()
    if pending_heredocs:
        read_heredocs(n)
    _strip_command_prefixes(commands)
    _assign_working_directories(commands)
    return commands


def _strip_command_prefixes(commands: list[_SimpleCommand]) -> None:
    for command in commands:
        words = command.words
        while words and (words[0] in _COMMAND_PREFIX_WORDS or _SHELL_ASSIGNMENT.match(words[0])):
            words.pop(0)
        if words and words[0] == "timeout":
            words.pop(0)
            while words and (words[0].startswith("-") or words[0][:1].isdigit()):
                words.pop(0)


def _assign_working_directories(commands: list[_SimpleCommand]) -> None:
    # Each action runs in a fresh shell at the repository root; a cd inside it carries
    # to the commands after it (subshells are not told apart: agents rarely use them).
    cwd = ""
    for command in commands:
        command.cwd = cwd
        if command.name == "cd":
            target = command.words[1] if len(command.words) > 1 else REPOSITORY_ROOT
            cwd = _resolve(target, cwd)


def _resolve(token: str, cwd: str) -> str:
    """A path as the repository sees it: relative to its root when inside it,
    absolute otherwise."""
    if token.startswith("/"):
        absolute = posixpath.normpath(token)
    else:
        base = cwd if cwd.startswith("/") else posixpath.join(REPOSITORY_ROOT, cwd)
        absolute = posixpath.normpath(posixpath.join(base, token))
    if absolute == REPOSITORY_ROOT:
        return ""
    if absolute.startswith(REPOSITORY_ROOT + "/"):
        return absolute[len(REPOSITORY_ROOT) + 1:]
    return absolute


# ------------------------------------------------------------------------------ paths

def _has_file_extension(name: str, *, bare: bool) -> bool:
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem.strip("."):
        return False
    extension = extension.lower()
    if bare and extension in AMBIGUOUS_BARE_EXTENSIONS:
        return False
    return extension in FILE_EXTENSIONS


def _path_of_token(token: str, cwd: str) -> str | None:
    """The repository-relative path a command token names, or None when it does not
    look like one: relative with a "/" or a file extension, or absolute under the
    repository root. A pytest node id names its file."""
    token = token.split("::", 1)[0].strip()
    if not token or token.startswith("-") or not _PATH_CHARS.fullmatch(token):
        return None
    if token.startswith("/") and not token.startswith(REPOSITORY_ROOT + "/"):
        return None
    path = _resolve(token.rstrip("/") or token, cwd)
    if not path or path.startswith("/") or path.startswith(".."):
        return None
    components = path.split("/")
    if _has_file_extension(components[-1], bare=len(components) == 1):
        return path
    # A directory needs a "/" and words for parts: x/y and 1/2 are arithmetic.
    if len(components) > 1 and all(len(part) >= 2 and re.search(r"[A-Za-z]", part)
                                   for part in components):
        return path
    return None


def _path_spellings(token: str) -> Iterator[str]:
    """The repository-relative paths a path-like token of a text shows: itself without
    the root, ./ or a git diff's a/ or b/ prefix, and every directory above it."""
    token = token.rstrip("./") if token.endswith((".", "/")) else token
    candidates = {token}
    if token.startswith(REPOSITORY_ROOT + "/"):
        candidates.add(token[len(REPOSITORY_ROOT) + 1:])
    for prefix in ("./", "a/", "b/"):
        if token.startswith(prefix):
            candidates.add(token[len(prefix):])
    for candidate in candidates:
        if not candidate or candidate.startswith("/"):
            continue
        yield candidate
        head = candidate
        while "/" in head:
            head = head.rsplit("/", 1)[0]
            yield head


def _file_mentioned(line: str) -> str | None:
    """The last file path a line of text names (normalized), for numbered listings."""
    mentioned = None
    for token in _PATH_CHARS.findall(line):
        token = token.rstrip(".")
        if "/" not in token and not _has_file_extension(token, bare=True):
            continue
        path = _path_of_token(token, "")
        if path and _has_file_extension(path.rsplit("/", 1)[-1], bare=False):
            mentioned = path
    return mentioned


def _same_file(listed: str, anchored: str) -> bool:
    # A listing made after a cd names the file by a shorter path.
    return (listed == anchored or anchored.endswith("/" + listed)
            or listed.endswith("/" + anchored))


# ------------------------------------------------------------------------ the windows

# A listing line that shows a file's line number beside its text:
#   nl -ba / cat -n:            "   120\t    text" (also behind a grep prefix "3074-  3074\t")
#   grep -n over several files: "path:120:text", context lines "path-120-text"
#   grep -n over one file:      "120:text", context lines "120-text"
_NUMBERED_TAB = re.compile(r"^(?:\S*[:-])?\s*(\d+)\t(.*)$")
_NUMBERED_PATH = re.compile(r"^([^\s:]+):(\d+):(.*)$|^(\S+?)-(\d+)-(.*)$")
_NUMBERED_BARE = re.compile(r"^(\d+)[:-](.*)$")


def _collapse(text: str) -> str:
    return " ".join(text.split())


class WindowIndex:
    """A text (a window, an observation, the task) read once for every anchor check.

    ``keeps(anchor)`` says whether the text holds the anchor, by its class:

    - EDIT: the anchor's text, whitespace collapsed, occurs in the text, collapsed.
    - IDENTIFIER: the word occurs as a whole word.
    - PATH: a path-like token of the text names the path (see ``_path_spellings``).
    - LINE: a numbered listing line (``_NUMBERED_*``) carries the anchor's number and,
      when the file's lines are given, that line's text (whitespace collapsed) — and the
      listing is about the anchor's file: its line names the file (``path:N:text``), or
      else the nearest earlier line that is not a listing line names it (the command
      ``nl -ba FILE`` or ``grep -n X FILE`` before its output, a header). Without the
      file's lines, the number in a listing about the file is all that is checked.

    The harness's markup tags (``HARNESS_MARKUP_TAGS``) are not part of the text.
    """

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _content(self) -> str:
        return _MARKUP.sub(" ", self.text)

    @cached_property
    def collapsed(self) -> str:
        return _collapse(self._content)

    @cached_property
    def words(self) -> frozenset[str]:
        return frozenset(_WORD.findall(self._content))

    @cached_property
    def paths(self) -> frozenset[str]:
        shown: set[str] = set()
        for token in _PATH_CHARS.findall(self._content):
            if "/" in token or "." in token:
                shown.update(_path_spellings(token))
        return frozenset(shown)

    @cached_property
    def numbered_lines(self) -> dict[int, list[tuple[str | None, str]]]:
        """Line number -> (the file the listing is about, or None; the collapsed text)."""
        listed: dict[int, list[tuple[str | None, str]]] = {}
        current_file: str | None = None
        for line in self._content.splitlines():
            entry = _numbered_entry(line)
            if entry is None:
                current_file = _file_mentioned(line) or current_file
                continue
            named_file, number, text = entry
            listed.setdefault(number, []).append((named_file or current_file, _collapse(text)))
        return listed

    def keeps(self, anchor: Anchor, *, file_lines: FileLines | None = None,
              unnamed_listing_counts: bool = False) -> bool:
        """``unnamed_listing_counts``: a listing that names no file may be about the
        anchor's (an observation alone lacks the command that named it)."""
        if anchor.anchor_class == AnchorClass.EDIT:
            return _collapse(anchor.text) in self.collapsed or (
                anchor.spelled is not None and _collapse(anchor.spelled) in self.collapsed)
        if anchor.anchor_class == AnchorClass.IDENTIFIER:
            return anchor.text in self.words
        if anchor.anchor_class == AnchorClass.PATH:
            return anchor.text in self.paths
        return self._keeps_line(anchor, file_lines, unnamed_listing_counts)

    def _keeps_line(self, anchor: Anchor, file_lines: FileLines | None,
                    unnamed_listing_counts: bool) -> bool:
        if anchor.path is None or anchor.line is None:
            return False
        expected: str | None = None
        lines = _lines_of(file_lines, anchor.path)
        if lines is not None:
            if not 1 <= anchor.line <= len(lines):
                return False
            expected = _collapse(lines[anchor.line - 1])
        for listed_file, text in self.numbered_lines.get(anchor.line, ()):
            if listed_file is None:
                if not unnamed_listing_counts:
                    continue
            elif not _same_file(listed_file, anchor.path):
                continue
            if expected is None or text == expected:
                return True
        return False


def _numbered_entry(line: str) -> tuple[str | None, int, str] | None:
    match = _NUMBERED_TAB.match(line)
    if match:
        return None, int(match.group(1)), match.group(2)
    match = _NUMBERED_PATH.match(line)
    if match:
        path, number, text = match.group(1, 2, 3) if match.group(1) else match.group(4, 5, 6)
        named = _path_of_token(path, "")
        if named:
            return named, int(number), text
    match = _NUMBERED_BARE.match(line)
    if match:
        return None, int(match.group(1)), match.group(2)
    return None


def _lines_of(file_lines: FileLines | None, path: str) -> Sequence[str] | None:
    if file_lines is None:
        return None
    if isinstance(file_lines, Mapping):
        return file_lines.get(path)
    return file_lines(path)


# Windows and observations are read many times (every anchor of a run is checked
# against every window, and every observation is an earlier one of many decisions);
# str caches its hash, so a repeated text is found cheaply. Each decision reads all the
# run's earlier observations in order, so the cache holds more than a long run has (a
# smaller one, read cyclically, would miss every time: 0.5 s a decision at 260 steps).
_TEXT_INDEX_CACHE_SIZE = 1024


@lru_cache(maxsize=_TEXT_INDEX_CACHE_SIZE)
def _index_of(text: str) -> WindowIndex:
    return WindowIndex(text)


def anchor_kept(anchor: Anchor, window_text: str, *,
                file_lines: FileLines | None = None) -> bool:
    """Whether the window holds the anchor (``WindowIndex.keeps``). ``file_lines``: the
    files' lines at the decision, needed to check a LINE anchor's text."""
    return _index_of(window_text).keeps(anchor, file_lines=file_lines)


def observations_holding(anchor: Anchor, observations: Sequence[str], *,
                         file_lines: FileLines | None = None) -> list[int]:
    """Indices of the observations that hold the anchor, oldest first. A numbered
    listing that names no file counts for a LINE anchor here: an observation is the
    command's output without the command that named the file."""
    return [number for number, observation in enumerate(observations)
            if _index_of(observation).keeps(anchor, file_lines=file_lines,
                                            unnamed_listing_counts=True)]


# -------------------------------------------------------------------------------- sed

@dataclass(frozen=True)
class _SedInvocation:
    script: str
    files: tuple[str, ...]
    in_place: bool
    extended: bool


def sed_file_operands(words: Sequence[str]) -> tuple[str, ...]:
    """The files a sed command (its words, ``sed`` first) reads: its operands after the
    script."""
    invocation = _sed_invocation(words)
    return invocation.files if invocation is not None else ()


def _sed_invocation(words: Sequence[str]) -> _SedInvocation | None:
    """A sed command's script, operands and the options that matter here (-i, -E);
    None when the script is read from a file."""
    scripts: list[str] = []
    operands: list[str] = []
    in_place = extended = script_from_file = False
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            operands.extend(words[i + 1:])
            break
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            if name == "in-place":
                in_place = True
            elif name == "regexp-extended":
                extended = True
            elif name in ("expression", "file", "line-length"):
                if not has_value:
                    i += 1
                    value = words[i] if i < len(words) else ""
                if name == "expression":
                    scripts.append(value)
                script_from_file |= name == "file"
            i += 1
            continue
        if word.startswith("-") and len(word) > 1:
            for position, flag in enumerate(word[1:], start=1):
                if flag == "i":
                    in_place = True
                    break  # the rest of the word is a backup suffix
                if flag in "Er":
                    extended = True
                elif flag in "efl":
                    value = word[position + 1:]
                    if not value:
                        i += 1
                        value = words[i] if i < len(words) else ""
                    if flag == "e":
                        scripts.append(value)
                    script_from_file |= flag == "f"
                    break
            i += 1
            continue
        operands.append(word)
        i += 1
    if script_from_file and not scripts:
        return None
    if not scripts:
        if not operands:
            return None
        scripts, operands = [operands[0]], operands[1:]
    # GNU sed joins its -e expressions with newlines (an 'a\' may continue in the next)
    return _SedInvocation("\n".join(scripts), tuple(operands), in_place, extended)


@dataclass(frozen=True)
class _RegexAddress:
    pattern: str  # as written, escapes and all
    delimiter: str


@dataclass(frozen=True)
class _LinesAfter:
    """A second address ``+N``: the N lines after the first."""

    count: int


# "$", "first~step", a second address "~N": they select lines the script does not number
_UNNUMBERED_ADDRESS = "unnumbered"
_SedAddress = int | _RegexAddress | _LinesAfter | str | None


@dataclass(frozen=True)
class _SedCommand:
    name: str
    lines: tuple[int, ...]  # the lines a numeric address selects; () for any other
    address_patterns: tuple[_RegexAddress, ...]
    old: _RegexAddress | None = None  # an s command's regex


def _read_delimited(script: str, i: int, delimiter: str) -> tuple[str, int]:
    """The raw text up to the next unescaped delimiter, and the index past it."""
    start = i
    while i < len(script) and script[i] != delimiter:
        i += 2 if script[i] == "\\" else 1
    return script[start:i], i + 1


def _read_digits(script: str, i: int) -> int:
    while i < len(script) and script[i].isdigit():
        i += 1
    return i


def _read_address(script: str, i: int) -> tuple[_SedAddress, int]:
    """One sed address and the index past it; None when there is none."""
    if i < len(script) and script[i].isdigit():
        end = _read_digits(script, i)
        if end < len(script) and script[end] == "~":
            return _UNNUMBERED_ADDRESS, _read_digits(script, end + 1)
        return int(script[i:end]), end
    if i < len(script) and script[i] == "$":
        return _UNNUMBERED_ADDRESS, i + 1
    if i < len(script) and script[i] in "/\\":
        delimiter = "/"
        if script[i] == "\\":  # \cREGEXc
            i += 1
            delimiter = script[i] if i < len(script) else "/"
        pattern, i = _read_delimited(script, i + 1, delimiter)
        while i < len(script) and script[i] in "IM":
            i += 1
        return _RegexAddress(pattern, delimiter), i
    return None, i


def _read_second_address(script: str, i: int) -> tuple[_SedAddress, int]:
    if i < len(script) and script[i] in "+~":
        end = _read_digits(script, i + 1)
        if script[i] == "+":
            return _LinesAfter(int(script[i + 1:end] or 0)), end
        return _UNNUMBERED_ADDRESS, end
    return _read_address(script, i)


def _skip_to_line_end(script: str, i: int) -> int:
    """Past the text of a/i/c (or a file name): to the first newline a backslash does
    not escape."""
    while i < len(script) and script[i] != "\n":
        i += 2 if script[i] == "\\" else 1
    return i


# s flags, and the commands whose argument is a label up to ";" or a newline
_SUBSTITUTE_FLAGS = frozenset("gpiImMe0123456789")
_LABEL_COMMANDS = frozenset(":btTv")
_TO_LINE_END_COMMANDS = frozenset("aicrRwWe")


def _parse_sed_script(script: str) -> list[_SedCommand]:
    commands: list[_SedCommand] = []
    i, n = 0, len(script)
    while i < n:
        if script[i] in " \t\n;}":
            i += 1
            continue
        if script[i] == "#":
            i = _skip_to_line_end(script, i)
            continue
        first, i = _read_address(script, i)
        second: _SedAddress = None
        if first is not None and i < n and script[i] == ",":
            second, i = _read_second_address(script, i + 1)
        while i < n and script[i] in " \t":
            i += 1
        negated = i < n and script[i] == "!"
        while i < n and script[i] in "! \t":
            i += 1
        if i >= n:
            break
        name = script[i]
        i += 1
        old = None
        if name in _TO_LINE_END_COMMANDS:
            i = _skip_to_line_end(script, i)
        elif name in _LABEL_COMMANDS:
            while i < n and script[i] not in ";\n}":
                i += 1
        elif name in "sy" and i < n:
            delimiter = script[i]
            pattern, i = _read_delimited(script, i + 1, delimiter)
            _, i = _read_delimited(script, i, delimiter)  # the replacement
            while i < n and script[i] in _SUBSTITUTE_FLAGS:
                i += 1
            if i < n and script[i] == "w":
                i = _skip_to_line_end(script, i)
            if name == "s":
                old = _RegexAddress(pattern, delimiter)
        commands.append(_SedCommand(
            name,
            lines=() if negated else _addressed_lines(first, second),
            address_patterns=tuple(a for a in (first, second) if isinstance(a, _RegexAddress)),
            old=old))
    return commands


def _addressed_lines(first: _SedAddress, second: _SedAddress) -> tuple[int, ...]:
    if not isinstance(first, int):
        return ()
    if second is None:
        return (first,)
    if isinstance(second, int):
        # a second line before the first selects the first line alone (GNU sed)
        return tuple(range(first, max(first, second) + 1))
    if isinstance(second, _LinesAfter):
        return tuple(range(first, first + second.count + 1))
    return ()


# A backslash before punctuation stands for that character in a sed regex (\. \* \[ \/
# \%), except before these, where it makes an operator: a group, an interval, a
# repetition, an alternative, a word or buffer boundary (GNU basic regex). Before a
# letter or digit it is a class or a back-reference (\w \s \n \1), \t aside.
_SED_ESCAPED_OPERATORS = frozenset("(){}+?|<>'`")
_SED_ESCAPED_OPERATORS_EXTENDED = frozenset("<>'`")
_ERE_OPERATORS = frozenset("()+?{}|")


def _sed_literal(pattern: str, delimiter: str, extended: bool) -> str | None:
    """The text a sed regex matches when it is a literal after de-escaping, else None.

    A lone unescaped "." counts as itself: agents write ``self.data`` meaning that text
    (it matches it, and the issue names ``.*``, not ``.``, as a pattern)."""
    literal: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        following = pattern[i + 1] if i + 1 < n else ""
        if char == "\\":
            operators = _SED_ESCAPED_OPERATORS_EXTENDED if extended else _SED_ESCAPED_OPERATORS
            if following == delimiter:
                literal.append(following)
            elif following == "t":
                literal.append("\t")
            elif not following or following.isalnum() or following == "_" or following in operators:
                return None
            else:
                literal.append(following)
            i += 2
            continue
        if char == "." and (following == "*" or (extended and following in "+?{")):
            return None
        if char == "*" and i > 0:
            return None  # a repetition; a leading * is literal in a basic regex
        if char == "[":
            return None
        if char == "^" and (i == 0 or extended):
            return None
        if char == "$" and (i == n - 1 or extended):
            return None
        if extended and char in _ERE_OPERATORS:
            return None
        literal.append(char)
        i += 1
    return "".join(literal)


# sed commands that change the addressed lines (or insert at them)
_SED_LINE_EDITS = frozenset("acdirRsy")
# sed commands whose /regex/ address names the very lines they replace
_SED_REPLACING_COMMANDS = frozenset("dc")


def _sed_anchors(command: _SimpleCommand) -> Iterator[Anchor]:
    invocation = _sed_invocation(command.words) if command.name == "sed" else None
    if invocation is None or not invocation.in_place or not invocation.files:
        return
    files = [_resolve(operand, command.cwd) for operand in invocation.files]
    edited = files[0] if len(files) == 1 else None
    for sed_command in _parse_sed_script(invocation.script):
        texts = [sed_command.old] if sed_command.old is not None else []
        if sed_command.name in _SED_REPLACING_COMMANDS:
            texts.extend(sed_command.address_patterns)
        located_by_text = False
        for text in texts:
            literal = _sed_literal(text.pattern, text.delimiter, invocation.extended)
            if literal is None or "\n" in literal or len(_collapse(literal)) < MIN_SED_TEXT_CHARS:
                continue
            located_by_text = True
            spelled = text.pattern.strip()
            yield Anchor(AnchorClass.EDIT, literal.strip(), path=edited,
                         spelled=spelled if spelled != literal.strip() else None)
        if sed_command.name not in _SED_LINE_EDITS or located_by_text:
            continue
        for path in files:
            for number in sed_command.lines:
                yield Anchor(AnchorClass.LINE, f"{path}:{number}", path=path, line=number)


# ----------------------------------------------------------------------------- python

@dataclass(frozen=True)
class _PythonScript:
    source: str
    cwd: str


class _PythonRun(NamedTuple):
    code: str | None  # python -c CODE
    reads_stdin: bool  # python - <<EOF, python3 <<EOF


def _python_run(words: Sequence[str]) -> _PythonRun | None:
    """How a python command gets its program; None for any other command."""
    if not words or not _PYTHON_EXECUTABLE.match(posixpath.basename(words[0])):
        return None
    i = 1
    while i < len(words):
        word = words[i]
        if word == "-":
            return _PythonRun(None, reads_stdin=True)
        if not word.startswith("-"):
            return _PythonRun(None, reads_stdin=False)  # it runs a script file
        flags = word[1:]
        if "c" in flags:
            code = flags[flags.index("c") + 1:] or (words[i + 1] if i + 1 < len(words) else "")
            return _PythonRun(code, reads_stdin=False)
        if "m" in flags:
            return _PythonRun(None, reads_stdin=False)
        if flags in ("W", "X"):
            i += 1  # the option's argument
        i += 1
    return _PythonRun(None, reads_stdin=True)


def _heredoc_targets(command: _SimpleCommand) -> list[str]:
    """The files a cat/tee command writes its heredoc to."""
    if not command.heredocs or command.name not in ("cat", "tee"):
        return []
    targets = command.output_files()
    if command.name == "tee":
        targets += [word for word in command.words[1:] if not word.startswith("-")]
    return targets


def _python_scripts(commands: Sequence[_SimpleCommand]) -> list[_PythonScript]:
    """The Python programs of a command: python -c code, a heredoc python reads, and a
    heredoc written to a .py file — run by this command or not: its text is this
    action's (the recorded agents often write a script one step and run it the next)."""
    scripts: list[_PythonScript] = []
    for command in commands:
        run = _python_run(command.words)
        if run is not None and run.code is not None:
            scripts.append(_PythonScript(run.code, command.cwd))
        writes_python = any(target.endswith(".py") for target in _heredoc_targets(command))
        if (run is not None and run.reads_stdin) or writes_python:
            scripts.extend(_PythonScript(document, command.cwd) for document in command.heredocs)
    return scripts


@dataclass
class _PythonReading:
    """What a Python script shows: the files it writes (None: a target it computes),
    the first arguments of its .replace calls that are string literals, its string
    literals, and the lines it edits by index."""

    written: list[str | None] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    # 1-based lines a script changes through a list of the file's lines by literal
    # index: lines[217:220] = ..., lines[798] = ..., del lines[5:9], lines.insert(40, x)
    indexed_lines: list[int] = field(default_factory=list)

    def writes_repository_file(self, cwd: str, is_repository_file: Callable[[str], bool]) -> bool:
        return bool(self.edited_paths(cwd, is_repository_file))

    def edited_paths(self, cwd: str, is_repository_file: Callable[[str], bool]) -> list[str]:
        named = [path for path in (_resolve(t, cwd) for t in self.written if t)
                 if is_repository_file(path)]
        if named or None not in self.written:
            return named
        # A target the script computes (a variable, a loop): judged by the
        # repository files the script names at all.
        return [path for path in (_path_of_token(s, cwd) for s in self.strings)
                if path and is_repository_file(path)]


_WRITE_MODE_CHARS = frozenset("wax+")


def _read_python(source: str) -> _PythonReading:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _read_python_tokens(source)
    bound = _names_bound_once_to_constants(tree)
    file_line_lists = _names_of_line_lists(tree)

    def string_of(node: ast.expr | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            value = bound.get(node.id)
            return value if isinstance(value, str) else None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "join" and node.args):
            parts = [string_of(arg) for arg in node.args]
            known = [part for part in parts if part is not None]
            if len(known) == len(parts):
                return posixpath.join(*known)  # os.path.join of literals
        return None

    reading = _PythonReading()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            reading.strings.append(node.value)
        reading.indexed_lines.extend(_indexed_lines(node, file_line_lists, bound))
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        function_name = (function.attr if isinstance(function, ast.Attribute)
                         else function.id if isinstance(function, ast.Name) else "")
        receiver_path = _path_call_argument(function)
        keyword_values = {kw.arg: kw.value for kw in node.keywords}
        if function_name == "open":
            target: ast.expr | None
            mode: ast.expr | None
            if receiver_path is not None:  # Path(x).open(mode)
                target, mode = receiver_path, (node.args[0] if node.args else None)
            else:
                target = node.args[0] if node.args else keyword_values.get("file")
                mode = node.args[1] if len(node.args) > 1 else None
            mode = keyword_values.get("mode", mode)
            mode_text = string_of(mode)
            if mode_text and _WRITE_MODE_CHARS & set(mode_text):
                reading.written.append(string_of(target))
        elif function_name in ("write_text", "write_bytes"):
            reading.written.append(string_of(receiver_path) if receiver_path else None)
        elif function_name in ("input", "FileInput") and _is_true(keyword_values.get("inplace")):
            files = node.args[0] if node.args else keyword_values.get("files")
            reading.written.append(string_of(files))
        elif function_name == "replace" and len(node.args) >= 2:
            old = string_of(node.args[0])
            if old is not None:
                reading.replaced.append(old)
    return reading


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _path_call_argument(function: ast.expr) -> ast.expr | None:
    """x of ``Path(x).method`` / ``pathlib.Path(x).method``."""
    if not isinstance(function, ast.Attribute) or not isinstance(function.value, ast.Call):
        return None
    call = function.value
    called = call.func
    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
    return call.args[0] if name in ("Path", "PosixPath") and call.args else None


def _names_bound_once_to_constants(tree: ast.AST) -> dict[str, str | int]:
    """Names the script binds exactly once, to a plain string or int literal: their
    value is as known as the literal's (``old = '''...'''`` then ``s.replace(old,
    new)``; ``start = 744`` then ``lines[start:start + 3] = ...``)."""
    bindings: dict[str, int] = {}
    values: dict[str, str | int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bindings[node.id] = bindings.get(node.id, 0) + 1
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)):
            constant = node.value.value
            if type(constant) is str or type(constant) is int:
                values[node.targets[0].id] = constant
    return {name: value for name, value in values.items() if bindings.get(name) == 1}


# Calls that turn a file's text into a list of its lines.
_LINE_LIST_CALLS = frozenset({"readlines", "splitlines"})


def _names_of_line_lists(tree: ast.AST) -> frozenset[str]:
    """Names bound to a file's lines: ``lines = f.readlines()``,
    ``lines = text.splitlines(True)``, ``lines = f.read().split("\\n")``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)):
            continue
        call, method = node.value, node.value.func.attr
        splits_lines = method in _LINE_LIST_CALLS or (
            method == "split" and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant) and call.args[0].value == "\n")
        if splits_lines:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def _int_of(node: ast.expr | None, bound: Mapping[str, str | int]) -> int | None:
    """A non-negative index the script spells out: a literal, a name bound once to one,
    or a sum or difference of those."""
    value: int | None = None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
    elif isinstance(node, ast.Name):
        bound_value = bound.get(node.id)
        if type(bound_value) is int:
            value = bound_value
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        left, right = _int_of(node.left, bound), _int_of(node.right, bound)
        if left is not None and right is not None:
            value = left + right if isinstance(node.op, ast.Add) else left - right
    return value if value is not None and value >= 0 else None


def _indexed_lines(node: ast.AST, line_lists: frozenset[str],
                   bound: Mapping[str, str | int]) -> list[int]:
    """The 1-based lines one statement or call changes in a list of a file's lines."""
    if isinstance(node, ast.Call):
        function = node.func
        if (isinstance(function, ast.Attribute) and function.attr == "insert"
                and isinstance(function.value, ast.Name) and function.value.id in line_lists
                and node.args):
            inserted_at = _int_of(node.args[0], bound)
            return [] if inserted_at is None else [inserted_at + 1]  # before that line
        return []
    if isinstance(node, ast.Assign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    elif isinstance(node, ast.Delete):
        targets = node.targets
    else:
        return []
    lines: list[int] = []
    for target in targets:
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                and target.value.id in line_lists):
            continue
        index = target.slice
        if isinstance(index, ast.Slice):
            start, stop = _int_of(index.lower, bound), _int_of(index.upper, bound)
            if start is None or stop is None or index.step is not None:
                continue
            # lines[a:b] holds lines a+1..b; an empty slice inserts before line a+1
            lines.extend(range(start + 1, max(start + 1, stop) + 1))
        else:
            position = _int_of(index, bound)
            if position is not None:
                lines.append(position + 1)
    return lines


_WRITE_CALL = re.compile(r"""\bopen\s*\([^)\n]*['"][rbt]*[wax+][rbt+]*['"]"""
                         r"|\.write_(?:text|bytes)\s*\(|inplace\s*=\s*True")


def _read_python_tokens(source: str) -> _PythonReading:
    """A script that does not parse (a shell variable in it, a fragment): its string
    tokens, .replace calls on literals, and whether it writes a file at all."""
    reading = _PythonReading()
    tokens: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            tokens.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the tokens read so far still tell
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE,
                                                        tokenize.COMMENT, tokenize.INDENT,
                                                        tokenize.DEDENT)]
    for position, token in enumerate(significant):
        if token.type == tokenize.STRING:
            value = _plain_string_value([token])
            if value is not None:
                reading.strings.append(value)
        if not (token.type == tokenize.NAME and token.string == "replace" and position >= 1
                and significant[position - 1].string == "."
                and position + 1 < len(significant) and significant[position + 1].string == "("):
            continue
        literal: list[tokenize.TokenInfo] = []
        following = position + 2
        while following < len(significant) and significant[following].type == tokenize.STRING:
            literal.append(significant[following])
            following += 1
        if literal and following < len(significant) and significant[following].string == ",":
            value = _plain_string_value(literal)
            if value is not None:
                reading.replaced.append(value)
    if _WRITE_CALL.search(source):
        reading.written.append(None)
    return reading


def _plain_string_value(tokens: Sequence[tokenize.TokenInfo]) -> str | None:
    """The value of adjacent string literal tokens when all are plain (not f-strings,
    not bytes)."""
    for token in tokens:
        letters = re.match(r"[A-Za-z]*", token.string)
        prefix = letters.group(0).lower() if letters else ""
        if "f" in prefix or "b" in prefix:
            return None
    try:
        value = ast.literal_eval(" ".join(token.string for token in tokens))
    except (SyntaxError, ValueError):
        return None
    return value if isinstance(value, str) else None


# ----------------------------------------------------------------- repository files

def _looks_like_repository_file(path: str) -> bool:
    """The default judgement of a repository file: a relative path under a directory
    of the repository. The recorded agents put their own scripts at the root
    (reproduce_issue.py, apply_fix.py); a root file of the project (setup.py) is missed
    — pass ``is_repository_file`` to judge against the real tree."""
    return bool(path) and not path.startswith(("/", "..")) and "/" in path


def _looks_like_source_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return _has_file_extension(name, bare=False) and not name.endswith(BACKUP_SUFFIXES)


# ------------------------------------------------------------------------ the action

# patch / git apply options that only inspect a patch
_PATCH_DRY_RUN_OPTIONS = frozenset({"--dry-run", "--check", "--stat", "--numstat", "--summary"})


def at_repository_root(command: str, workdir: str) -> str:
    """``command`` as the recorded runs would spell it: the paths under ``workdir`` (where
    a harness ran it, e.g. ``/home/u/repo``) under ``REPOSITORY_ROOT`` instead, which is
    where this module reads a command's paths from."""
    root = workdir.rstrip("/") or "/"
    if root == REPOSITORY_ROOT or root == "/":
        return command
    return re.sub(r"(?<![\w./-])" + re.escape(root) + r"(?=/|[\s'\";&|)<>]|$)", REPOSITORY_ROOT,
                  command)


def is_edit_command(command: str, *,
                    is_repository_file: Callable[[str], bool] | None = None,
                    workdir: str = REPOSITORY_ROOT) -> bool:
    """Whether the action edits a repository file (or authors the script that does).

    An edit: ``sed -i`` or ``perl -i`` on a repository file; a Python script (``python
    -c``, ``python - <<EOF``, or one written with ``cat > x.py <<EOF``, run now or not —
    the recorded agents often write it one step and run it the next, and its text is
    this action's) that opens a repository file for writing; output redirected (``cat >
    F <<EOF``, ``echo >> F``, ``tee F``) to a repository source file; ``mv``/``cp`` onto
    one; ``patch`` or ``git apply`` (not a dry run); ``ed``/``ex`` or ``awk -i inplace``
    on one. Not an edit: ``git checkout``/``restore``/``stash`` (they undo, taking
    nothing from an observation), writing a backup (``x.py.bak``) or a scratch file at
    the root. ``is_repository_file`` judges a repository-relative path (default:
    ``_looks_like_repository_file``); ``workdir``: where the harness ran the command."""
    is_repository = is_repository_file or _looks_like_repository_file
    commands = _shell_commands(at_repository_root(command, workdir))

    def source_file(token: str, cwd: str) -> bool:
        path = _resolve(token, cwd)
        return _looks_like_source_file(path) and is_repository(path)

    for simple in commands:
        name, words, cwd = simple.name, simple.words, simple.cwd
        operands = [word for word in words[1:] if not word.startswith("-")]
        if name == "sed":
            invocation = _sed_invocation(words)
            if invocation and invocation.in_place and any(
                    is_repository(_resolve(f, cwd)) for f in invocation.files):
                return True
        elif name == "perl":
            in_place = any(re.fullmatch(r"-[a-zA-Z]*i\S*", word) for word in words[1:])
            if in_place and any(is_repository(_resolve(f, cwd)) for f in operands[1:]):
                return True
        elif name == "patch" or (name == "git" and operands[:1] == ["apply"]):
            if not _PATCH_DRY_RUN_OPTIONS & set(words):
                return True
        elif name in ("mv", "cp") and operands:
            if source_file(operands[-1], cwd):
                return True
        elif name in ("ed", "ex") or (name in ("awk", "gawk") and "inplace" in words):
            if any(source_file(word, cwd) for word in operands):
                return True
        targets = simple.output_files() + (operands if name == "tee" else [])
        if any(source_file(target, cwd) for target in targets):
            return True
    return any(_read_python(script.source).writes_repository_file(script.cwd, is_repository)
               for script in _python_scripts(commands))


# Program arguments of these commands are code or a pattern, not operands naming files.
_SCRIPT_ARGUMENT_COMMANDS = frozenset({"sed", "awk", "gawk", "perl"})


def _operand_words(command: _SimpleCommand) -> list[str]:
    """The words of a command that may name files: not its name, not a sed/awk/perl
    program, not python -c code."""
    if command.name == "sed":
        invocation = _sed_invocation(command.words)
        return list(invocation.files) if invocation else []
    words = command.words[1:]
    if command.name in _SCRIPT_ARGUMENT_COMMANDS:
        operands = [word for word in words if not word.startswith("-")]
        return operands[1:]
    run = _python_run(command.words)
    if run is not None and run.code is not None:
        return [word for word in words if word != run.code]
    return words


def anchors_of_action(command: str, *, earlier_observations: Sequence[str],
                      system_prompt: str, task: str,
                      is_repository_file: Callable[[str], bool] | None = None) -> list[Anchor]:
    """The anchors of an action, from its command text (the module docstring gives the
    rules), de-duplicated by (class, text), in the order EDIT/LINE, PATH, IDENTIFIER.

    ``earlier_observations``: the observations before this action; ``system_prompt``
    and ``task``: the harness's system message and the task message (for mini-swe-agent,
    the first user message). ``is_repository_file``: as for ``is_edit_command``, judges
    which files a Python script's edit must write."""
    is_repository = is_repository_file or _looks_like_repository_file
    commands = _shell_commands(command)
    scripts = _python_scripts(commands)
    readings = [(script, _read_python(script.source)) for script in scripts]
    found: dict[tuple[AnchorClass, str], Anchor] = {}

    def add(anchor: Anchor) -> None:
        found.setdefault((anchor.anchor_class, anchor.text), anchor)

    for simple in commands:
        for anchor in _sed_anchors(simple):
            add(anchor)
    for script, reading in readings:
        edited = reading.edited_paths(script.cwd, is_repository)
        if not edited:
            continue
        edited_path = edited[0] if len(set(edited)) == 1 else None
        for old in reading.replaced:
            for line in old.splitlines():
                if line.strip():
                    add(Anchor(AnchorClass.EDIT, line.strip(), path=edited_path))
        if edited_path is not None:  # which file's lines they are must be plain
            for number in reading.indexed_lines:
                add(Anchor(AnchorClass.LINE, f"{edited_path}:{number}",
                           path=edited_path, line=number))

    observations = [_index_of(observation) for observation in earlier_observations]
    task_index = _index_of(task)
    prompt_index = _index_of(system_prompt)

    candidates: list[tuple[str, str]] = []
    for simple in commands:
        for token in _operand_words(simple) + [target for _, target in simple.redirects]:
            candidates.append((token, simple.cwd))
    for script, reading in readings:
        candidates.extend((string, script.cwd) for string in reading.strings)
    for token, cwd in candidates:
        path = _path_of_token(token, cwd)
        if path is None:
            continue
        if path in task_index.paths or not any(path in seen.paths for seen in observations):
            continue
        add(Anchor(AnchorClass.PATH, path))

    for word in names_in(_identifier_text(commands)):
        if (word in task_index.words or word in prompt_index.words
                or not any(word in seen.words for seen in observations)):
            continue
        add(Anchor(AnchorClass.IDENTIFIER, word))
    return list(found.values())


def _identifier_text(commands: Sequence[_SimpleCommand]) -> str:
    """The text a command's identifiers are read from: the words of its commands after
    the tool's name, its heredocs and python -c code — without the parts that are not
    taken from anywhere: options (``-name``, ``--include=*.py``: the tool's vocabulary),
    paths (a word inside ``sympy/core/basic.py`` is that path's anchor), redirection
    targets, and comments (the agent's prose, like its THOUGHT)."""
    parts: list[str] = []
    for simple in commands:
        run = _python_run(simple.words)
        for word in simple.words[1:]:
            if word.startswith("-") or _path_of_token(word, simple.cwd) is not None:
                continue
            is_code = run is not None and run.code == word
            parts.append(_python_code_text(word, simple.cwd) if is_code else word)
        python_heredocs = (run is not None and run.reads_stdin) or any(
            target.endswith(".py") for target in _heredoc_targets(simple))
        for document in simple.heredocs:
            parts.append(_python_code_text(document, simple.cwd) if python_heredocs else document)
    return "\n".join(parts)


def _python_code_text(source: str, cwd: str) -> str:
    """Python source without its comments and without the string literals that are
    paths."""
    comments: dict[int, int] = {}  # line number -> column where its comment starts
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the comments read so far
    lines = source.splitlines()
    for number, column in comments.items():
        lines[number - 1] = lines[number - 1][:column]
    code = "\n".join(lines)
    paths = {string for string in _read_python(source).strings
             if _path_of_token(string, cwd) is not None}
    for path in sorted(paths, key=len, reverse=True):
        code = code.replace(path, " ")
    return code


# one simple command of a shell line, as ``shell_commands`` reads it
ShellCommand = _SimpleCommand


def shell_commands(text: str) -> list[_SimpleCommand]:
    """The simple commands of a shell line (``name``, ``words``, ``cwd`` relative to the
    repository root, ``output_files()``), as the anchors read them."""
    return _shell_commands(text)
