"""``coven-codex exec``: one reproducible Codex run in a prepared workspace (docs/exec.md).

- :mod:`.arguments`: what is passed to Codex, what is refused, and the resume command;
- :mod:`.workspace`: the workspace (git, the isolated ``CODEX_HOME`` inside it, ``AGENTS.md``);
- :mod:`.run`: the run, the output-file retry, and trace capture.
"""
