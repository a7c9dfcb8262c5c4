"""pa-runfolder: each Private Assistant run works in its own folder.

Hermes's API server has no per-run working directory: every run of a home starts in
terminal.cwd. Before it submits a run, the agent makes the run's folder
<terminal.cwd>/runs/<run id> and writes the run id to <terminal.cwd>/runs/.sessions/<session
id>. Before the run's first model call this hook makes that folder the session's working
directory with register_task_env_overrides, what Hermes's own ACP, TUI and batch runner use
for a session's workspace: the run's terminal starts there and its file tools resolve
relative paths against it. Applied once per run, so a `cd` of the run's own holds.
"""

import logging
import os
import re

logger = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$")
_applied = {}  # task id -> the run folder last made its working directory


def _base():
    try:
        from agent.runtime_cwd import scope_terminal_cwd

        return scope_terminal_cwd()
    except Exception:
        return os.environ.get("TERMINAL_CWD", "")


def _pre_llm_call(task_id="", session_id="", **_):
    key = task_id or session_id
    base = _base()
    if not key or not _ID.match(key) or not base or not os.path.isabs(base):
        return None
    try:
        with open(os.path.join(base, "runs", ".sessions", key), encoding="utf-8") as f:
            run = f.read().strip()
    except OSError:
        return None
    if not _ID.match(run):
        return None
    folder = os.path.join(base, "runs", run)
    if _applied.get(key) == folder or not os.path.isdir(folder) or os.path.islink(folder):
        return None
    from tools.terminal_tool import register_task_env_overrides

    register_task_env_overrides(key, {"cwd": folder})
    _applied[key] = folder
    logger.info("pa-runfolder: session %s works in %s", key, folder)
    return None


def register(ctx):
    ctx.register_hook("pre_llm_call", _pre_llm_call)
