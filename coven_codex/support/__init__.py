"""Generic helpers every layer may use, and that use nothing of the project.

- :mod:`~coven_codex.support.backoff`: the one delay function of every retry loop, and the filter
  that lets a repeating failure reach the chat once;
- :mod:`~coven_codex.support.limits`: what ingress accepts (the journal protocol's limits) and how
  names and texts are cut for log lines;
- :mod:`~coven_codex.support.statelock`: one process per directory, journal or target (``flock``);
- :mod:`~coven_codex.support.lifecycle`: a phase enum moved only through its table of allowed transitions;
- :mod:`~coven_codex.support.http11`: just enough HTTP/1.1 for the small loopback servers;
- :mod:`~coven_codex.support.stdio`: standard input and output as asyncio streams.
"""
