"""Token counting: exact, offline, cached by content hash."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from sqlalchemy import func, select

from ctxdb import ContextStore
from ctxdb.models import token_count_cache
from ctxdb.tokens import CL100K_BASE, DEEPSEEK_V4, TokenizerUnavailable, get_counter

PYTHON_SNIPPET = textwrap.dedent(
    '''
    class Session(SessionRedirectMixin):
        def send(self, request, **kwargs):
            """Send a given PreparedRequest."""
            kwargs.setdefault("stream", self.stream)
            return adapter.send(request, **kwargs)
    '''
)


def test_cl100k_counts_known_values():
    counter = get_counter(CL100K_BASE)
    # Reference counts from OpenAI's cl100k_base: "hello world" is 2 tokens, "" is 0.
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    assert counter.count("<|endoftext|>") > 1  # special-token text is counted as text


def test_deepseek_counts_more_than_cl100k_on_python():
    """DeepSeek-V4 counts more tokens than cl100k_base on Python source (a setting, then)."""
    cl100k = get_counter(CL100K_BASE).count(PYTHON_SNIPPET * 20)
    deepseek = get_counter(DEEPSEEK_V4).count(PYTHON_SNIPPET * 20)
    assert deepseek > cl100k > 0


def test_unknown_tokenizer_names_the_choices():
    with pytest.raises(ValueError, match="cl100k_base.*deepseek-v4"):
        get_counter("gpt2")


def test_counting_needs_no_network(tmp_path):
    """A fresh process with every socket refused and an empty tiktoken cache still counts."""
    script = textwrap.dedent(
        """
        import socket
        def refuse(*args, **kwargs):
            raise OSError("network is blocked in this test")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from ctxdb.tokens import get_counter
        print(get_counter("cl100k_base").count("hello world"),
              get_counter("deepseek-v4").count("hello world"))
        """
    )
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(tmp_path / "empty-cache"))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    cl100k, deepseek = map(int, result.stdout.split())
    assert cl100k == 2 and deepseek >= 2


def test_tampered_encoding_file_is_refused(tmp_path, monkeypatch):
    import ctxdb.tokens as tokens

    fake = tmp_path / "tiktoken_ext" / "data"
    fake.mkdir(parents=True)
    (fake / "cl100k_base.tiktoken").write_bytes(b"aGVsbG8= 0\n")
    monkeypatch.setattr(
        tokens, "_package_data_file", lambda *a: fake / "cl100k_base.tiktoken"
    )
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(TokenizerUnavailable, match="(?i)hash mismatch"):
        tokens._load_cl100k()


def test_counts_are_cached_by_content_hash(store_url):
    texts = ["def total(cart):", "return 0", "def total(cart):"]
    with ContextStore.open(store_url) as store:
        first = store.count_tokens(texts)
        second = store.count_tokens(texts)
        deepseek = store.count_tokens(texts, DEEPSEEK_V4)
        with store.engine.connect() as connection:
            rows = dict(
                connection.execute(
                    select(token_count_cache.c.tokenizer, func.count())
                    .group_by(token_count_cache.c.tokenizer)
                ).all()
            )
    assert first == second == [get_counter(CL100K_BASE).count(t) for t in texts]
    assert deepseek == [get_counter(DEEPSEEK_V4).count(t) for t in texts]
    assert rows == {CL100K_BASE: 2, DEEPSEEK_V4: 2}  # two distinct texts per tokenizer


def test_a_count_over_the_exact_limit_is_counted_in_slices_never_under(capsys, tmp_path):
    """``ctxdb tokens count`` of a text over COUNT_EXACT_MAX_CHARS counts it in slices cut
    at line ends: within one token a cut of the exact count, never under it (the store's
    own bounded count takes the byte length there, four times over on code), and says
    on stderr that it is an upper bound; a short text is exact and says nothing."""
    from ctxdb.cli import main
    from ctxdb.tokens import COUNT_EXACT_MAX_CHARS, TOKENS_PER_CUT, count_in_slices

    counter = get_counter(CL100K_BASE)
    text = (PYTHON_SNIPPET + "\n    \n\n") * (COUNT_EXACT_MAX_CHARS // len(PYTHON_SNIPPET) + 500)
    cuts = len(text) // COUNT_EXACT_MAX_CHARS
    exact = counter.count_exact(text)
    sliced = count_in_slices(counter.count, text)
    assert exact <= sliced <= exact + cuts * TOKENS_PER_CUT
    assert counter.count(text) == len(text.encode())  # (the store's bound)
    (tmp_path / "long.py").write_text(text, encoding="utf-8")
    assert main(["tokens", "count", str(tmp_path / "long.py"),
                 "--tokenizer", CL100K_BASE]) == 0
    out, err = capsys.readouterr()
    assert out == f"{CL100K_BASE}\t{sliced}\n"
    assert "the count is an upper bound: the text is counted in slices (" in err
    (tmp_path / "short.py").write_text(PYTHON_SNIPPET, encoding="utf-8")
    assert main(["tokens", "count", str(tmp_path / "short.py"),
                 "--tokenizer", CL100K_BASE]) == 0
    out, err = capsys.readouterr()
    assert out == f"{CL100K_BASE}\t{counter.count_exact(PYTHON_SNIPPET)}\n" and err == ""
