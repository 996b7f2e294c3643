"""What each adapter offers, as data: docs/adapters.md's feature table is kept equal to it by a test.

:data:`FEATURES` maps a row (a feature) to what each adapter of :data:`ADAPTERS` does about it.
An adapter added to the project adds its column here (and to the table).
"""

from __future__ import annotations

ADAPTERS: dict[str, str] = {
    "console": "console (`chat`)",
    "web": "web page (`web`)",
    "slack": "Slack (`slack`)",
    "discord": "Discord (`discord`)",
    "telegram": "Telegram (`telegram`)",
}
"""The adapters, by name, with their column's heading."""

FEATURES: dict[str, tuple[str, ...]] = {
    "runs as": (
        "a terminal",
        "a local web server",
        "a process, Socket Mode (or HTTP events)",
        "a process, Gateway (discord.py)",
        "a process, long polling or a webhook (python-telegram-bot)",
    ),
    "conversation": (
        "a name (`--conversation`)",
        "a chat per page",
        "a channel thread (follow-ups without a mention once the bot is in it; the first mention carries the"
        " thread's earlier messages), a DM",
        "a channel, a thread per request (`thread_channels`), an existing thread, a DM; a session per user in"
        " `per_user_channels`",
        "a private chat, a group, a forum topic; a session per user in `per_user_channels`",
    ),
    "who may talk": (
        "you",
        "whoever has the token",
        "`allow_users`, `allow_groups` (user groups), `allow_channels`",
        "`allow_users`, `allow_groups` (roles), `allow_channels`",
        "`allow_users`, `allow_channels` (chat ids)",
    ),
    "a turn's steps": (
        "a line each as they happen; `--render quiet`: one progress card at the turn's end",
        'one folded group per turn: "31 steps · latest step"; opened, every call and result',
        'one progress card edited in place (`render = "quiet"`, the default): steps, elapsed time, Cancel,'
        " Details; `verbose`: a message each",
        'one progress card edited in place (`render = "quiet"`, the default): steps, elapsed time, Cancel,'
        " Details; `verbose`: a message each",
        'one progress card edited in place (`render = "quiet"`, the default): steps, elapsed time, Cancel,'
        " Details; `verbose`: a message each",
    ),
    "replies": (
        "ANSI text",
        "HTML from Markdown, streamed in a live bubble",
        "a message of its own (it notifies) in Slack's `markdown` block (standard Markdown), `section` blocks"
        " as the fallback; split at 2,800",
        "a message of its own (it notifies) in Markdown, tables as aligned code blocks; split at 2,000",
        "a message of its own in HTML from Markdown (plain-text fallback); split at 4,000",
    ),
    "reasoning": (
        "shown",
        "shown, folded",
        "off (`reasoning = true`: a card line)",
        "off (`reasoning = true`: a card line)",
        "off (`reasoning = true`: a card line)",
    ),
    "signs of life": (
        "status lines (`verbose`)",
        '"Codex is working… m:ss" in the header',
        "the thread's status \"is working…\", else a reaction on the user's message",
        "typing, triggered again every 8 s until the turn ends",
        "typing (`sendChatAction`), sent again every 4 s until the turn ends",
    ),
    "approvals": (
        "`/approve`, `/approve-session`, `/deny`",
        "buttons Approve, Approve for session, Deny; disabled with who decided",
        "buttons Approve, Approve for session, Deny; updated in place with who decided (buttons removed);"
        " `/codex approve`",
        "buttons Approve, Approve for session, Deny; disabled in place with who decided; `@bot /approve`",
        "inline buttons Approve, Approve for session, Deny; `/approve`, `/approve_session`",
    ),
    "cancel / new / status": (
        "`/cancel`, `/new`, `/status`",
        "buttons and commands",
        "buttons (Cancel; `/codex` shows all), `/codex ...`, `@Codex /cancel`",
        "slash commands `/codex`, `/cancel`, `/new`, `/status`; Cancel button; `@bot /cancel`",
        "commands (`/cancel`, `/new`, `/status`, in Telegram's menu via `setMyCommands`); Cancel button",
    ),
    "continue an earlier thread": (
        "`/resume` lists your earlier threads; `/resume THREAD_OR_CONVERSATION` continues one here",
        "`/resume [THREAD_OR_CONVERSATION]` (the token's holder may continue any thread)",
        "`/codex resume [THREAD]`, `@Codex /resume [THREAD]` (threads of conversations you took part in)",
        "`@bot /resume [THREAD]` (threads of conversations you took part in)",
        "`/resume [THREAD]`, in the command menu (threads of chats you took part in)",
    ),
    "project / model / mode": (
        "`/project`, `/model`, `/mode`",
        "the same commands in the composer",
        "`/codex project NAME`, `@Codex /model NAME`",
        "slash commands `/project`, `/model`, `/mode`; `@bot /mode NAME`",
        "commands `/project`, `/model`, `/mode` (in the menu)",
    ),
    "tool output on demand": (
        "`/details`",
        "every result on the page",
        "the card's Details button, `/details`",
        "the card's Details button, `@bot /details`",
        "the card's Details button, `/details`",
    ),
    "my conversations, history": (
        "`/list` (by name; `/conversation NAME` goes back), `/history [N]`",
        "`/list`, `/history [N]` in the composer",
        "`/codex list`, `/codex history [N]`, `@Codex /list`",
        "`@bot /list`, `@bot /history [N]`",
        "`/list`, `/history N` (in the command menu)",
    ),
    "images in": (
        "`/attach FILE`",
        "paste or choose",
        "files shared with the message",
        "attachments (PNG, JPEG, GIF, WebP up to 10 MiB)",
        "photos and image documents (up to 10 MiB)",
    ),
    "files out (`send_file`, generated images)": (
        "a line with the path",
        "a download link",
        "`files_upload_v2` in the thread",
        "an attachment (multipart)",
        "`sendDocument` (multipart)",
    ),
    "exactly once out": (
        "at least once (no `find`)",
        "by entry id on the page",
        "message metadata, found in the thread's history; the card too",
        "message `nonce` + `enforce_nonce`, found in the channel's recent history, ledger; the card too",
        "never lost; at most one repeat per crash or lost answer, inside a window of ~2 ms p50 (no `find`)",
    ),
    "configuration": ("flags", "flags", "`[adapters.slack]`", "`[adapters.discord]`", "`[adapters.telegram]`"),
}
"""Each feature row: what each adapter of :data:`ADAPTERS` does, in order."""


def feature_table() -> str:
    """The Markdown table docs/adapters.md shows (one row per feature, one column per adapter)."""
    lines = ["| | " + " | ".join(ADAPTERS.values()) + " |", "|---" * (len(ADAPTERS) + 1) + "|"]
    lines += [f"| {feature} | " + " | ".join(cells) + " |" for feature, cells in FEATURES.items()]
    return "\n".join(lines)
