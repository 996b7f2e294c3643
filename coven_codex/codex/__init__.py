"""The Codex CLI: finding it (:mod:`~coven_codex.codex.discovery`, :mod:`~coven_codex.codex.launch`,
:mod:`~coven_codex.codex.installed`), its version and capabilities, its isolated home
(:mod:`~coven_codex.codex.home`), its process trees (:mod:`~coven_codex.codex.process`), error
classification (:mod:`~coven_codex.codex.errors`), a thought on its way to Codex
(:mod:`~coven_codex.codex.thought`: the one value from a conversation's admission to a driver's edge)
and the two ways of driving it.

The drivers are used through :mod:`coven_codex.codex.drivers` (``create_driver``, ``CodexDriver``, the
events) and the shared app-server processes through :mod:`coven_codex.codex.appserver`
(``AppServerPool``); their modules are this package's own (an import-linter contract keeps them so).
Importing this package loads nothing.
"""
