"""Access control: who may talk to Codex through an adapter, where, and who may run admin commands.

A network-facing adapter allows **nobody** until configured (:class:`AccessPolicy` defaults) and
says so at start-up (:meth:`AccessPolicy.describe`). A refused user gets a short reply and
nothing reaches the journal. Users are matched by their platform id (or name), channels by id,
and users holding any of ``roles`` (Discord roles, Slack user groups) are allowed like listed users.
"""

from __future__ import annotations

from dataclasses import dataclass

from coven_codex.adapters.kit.platform import Address, User

ADMIN_COMMANDS = frozenset({"new"})
"""Commands only admins may run unless configured otherwise."""


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """Allow-lists. ``users``/``channels`` None means everyone/every channel; empty means nobody/none."""

    users: frozenset[str] | None = frozenset()
    channels: frozenset[str] | None = None
    roles: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    admin_commands: frozenset[str] = ADMIN_COMMANDS

    @classmethod
    def everyone(cls) -> AccessPolicy:
        """Everyone allowed and an admin: for a local adapter such as the console."""
        return cls(users=None, channels=None, admins=frozenset({"*"}))

    def _listed(self, user: User) -> bool:
        if self.users is None:
            return True
        return user.id in self.users or (bool(user.name) and user.name in self.users) or bool(user.roles & self.roles)

    def _admin(self, user: User) -> bool:
        return "*" in self.admins or user.id in self.admins or (bool(user.name) and user.name in self.admins)

    def is_admin(self, user: User) -> bool:
        """Whether ``user`` is one of the adapter's admins (``/resume`` lets an admin continue any thread)."""
        return self._admin(user)

    def refusal(self, user: User, address: Address, command: str | None = None) -> str | None:
        """None when ``user`` may do this at ``address`` (``command`` for a command), else the reply to give."""
        if self.channels is not None and address.channel not in self.channels:
            return "Codex is not enabled in this channel; ask the adapter's admin to add it."
        if not self._listed(user):
            return (
                f"You are not allowed to talk to Codex here; ask the adapter's admin to add your id ({user.id[:64]})."
            )
        if command is not None and command in self.admin_commands and not self._admin(user):
            return f"Only an admin may use {command}."
        return None

    @property
    def allows_nobody(self) -> bool:
        """True when no user can be allowed (the unconfigured default)."""
        return (self.users is not None and not self.users and not self.roles) or self.channels == frozenset()

    def describe(self) -> str:
        """One start-up line saying who is allowed (and that nobody is, when nobody is)."""
        if self.allows_nobody:
            return (
                "access: nobody is allowed yet; list user ids (or roles) in the adapter's allow-list"
                " to let people talk to Codex"
            )
        who = "everyone" if self.users is None else f"{len(self.users)} user(s), {len(self.roles)} role(s)"
        where = "every channel" if self.channels is None else f"{len(self.channels)} channel(s)"
        return f"access: {who} in {where}; {len(self.admins)} admin(s)"
