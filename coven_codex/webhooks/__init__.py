"""Turn-complete webhooks (docs/webhooks.md): every turn's end, POSTed to each configured URL.

``config`` (the ``[webhooks]`` table), ``payload`` (what is sent, signed), ``turns`` (what is
remembered between turn ends), ``sender`` (a journal consumer per target with saved cursors,
retries), ``service`` (running them, in the daemon or in ``coven-codex webhooks``).
"""
