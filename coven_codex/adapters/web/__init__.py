"""The web chat page: ``coven-codex web``, an ASGI app with a live WebSocket channel.

Modules: :mod:`.auth` (token, Host and Origin checks, security headers), :mod:`.render`
(entries as typed wire messages, Markdown rendered server-side to sanitised HTML),
:mod:`.hub` (one journal tail shared by every tab), :mod:`coven_codex.attachments` (pasted images),
:mod:`.app` (the Starlette app and the live channel) and :mod:`.server` (uvicorn).
"""
