"""Git run over repositories and trees someone else wrote (a recorded run's, a mirror, an
archive): nothing of their config or of this process's git variables steers it."""

from __future__ import annotations

import os

# no fetching, no hook or fsmonitor command of the repository's own config run, whoever
# owns it
HARDENED_GIT = ("git", "-c", "protocol.allow=never", "-c", "safe.directory=*",
                "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")


def git_env(**extra: str) -> dict[str, str]:
    """This process's environment without git's variables (a GIT_DIR or GIT_INDEX_FILE
    set around us must not redirect the commands) and without the host's git config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, **extra)
    return env
