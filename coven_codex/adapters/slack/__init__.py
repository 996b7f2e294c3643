"""The Slack adapter (``coven-codex slack``, ``pip install 'coven-codex[slack]'``; docs/adapters.md).

:mod:`.dialect` lays a message out as Block Kit blocks (model output in ``markdown`` blocks, other
text in sections of at most 3,000 characters, buttons); :mod:`.platform` is the kit's
:class:`~coven_codex.adapters.kit.platform.Platform` on ``slack_sdk``'s Web API client and a
``slack_bolt`` app (Socket Mode by default, HTTP events as an option).
"""
