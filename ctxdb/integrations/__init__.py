"""Drop-ins for agent harnesses: each module wraps one harness's own objects so its loop
sends ctxdb's window (``minisweagent``: mini-swe-agent 2.x, the extra ``minisweagent``:
``pip install -e '.[minisweagent]'`` in a checkout)."""
