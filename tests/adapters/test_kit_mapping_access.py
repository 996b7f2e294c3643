"""Conversation mapping and access control."""

from __future__ import annotations

from coven_codex.adapters.kit.access import AccessPolicy
from coven_codex.adapters.kit.commands import parse_command
from coven_codex.adapters.kit.mapping import ChannelMap, NamedMap
from coven_codex.adapters.kit.platform import Address, User

ANN, BOB = User("U1", "ann"), User("U2", "bob", frozenset({"devs"}))


def test_channel_names_round_trip_and_are_stable() -> None:
    mapping = ChannelMap("slack", per_user=frozenset({"C-private"}))
    address = Address(channel="C/01", workspace="T:1", thread="1700.1@x")
    name = mapping.conversation(address, ANN)
    assert name == ChannelMap("slack").conversation(address, BOB)  # shared: the same for everyone
    assert name.startswith("slack:") and mapping.address(name) == address
    private = Address(channel="C-private")
    assert mapping.conversation(private, ANN) != mapping.conversation(private, BOB)
    assert mapping.address(mapping.conversation(private, ANN)) == private
    assert mapping.address("discord:/C/") is None and mapping.address("default") is None
    assert mapping.address("slack:only-two/fields") is None


def test_named_map_only_knows_joined_conversations() -> None:
    mapping = NamedMap({"room"})
    assert mapping.conversation(Address(channel="room"), ANN) == "room"
    assert mapping.address("room") == Address(channel="room") and mapping.address("other") is None


def test_nobody_is_allowed_by_default_and_it_is_said() -> None:
    policy = AccessPolicy()
    refusal = policy.refusal(ANN, Address(channel="C1"))
    assert refusal is not None and "not allowed" in refusal and "U1" in refusal
    assert "nobody is allowed" in policy.describe()


def test_users_roles_channels_and_admin_commands() -> None:
    policy = AccessPolicy(
        users=frozenset({"U1"}), roles=frozenset({"devs"}), channels=frozenset({"C1"}), admins=frozenset({"U1"})
    )
    here, elsewhere = Address(channel="C1"), Address(channel="C2")
    assert policy.refusal(ANN, here) is None and policy.refusal(BOB, here) is None
    assert policy.refusal(User("U3"), here) is not None
    assert "not enabled in this channel" in (policy.refusal(ANN, elsewhere) or "")
    assert policy.refusal(ANN, here, "new") is None
    assert "Only an admin" in (policy.refusal(BOB, here, "new") or "")
    assert policy.refusal(BOB, here, "cancel") is None
    assert AccessPolicy.everyone().refusal(User("anyone"), elsewhere, "new") is None


def test_commands_parse_alike_typed_or_pressed() -> None:
    assert parse_command("/approve r1") == parse_command("approve r1", prefix="")
    command = parse_command("  /Deny  r2 ")
    assert command is not None and (command.name, command.argument, command.known) == ("deny", "r2", True)
    assert parse_command("hello /cancel") is None and parse_command("/") is None
    unknown = parse_command("/frobnicate")
    assert unknown is not None and not unknown.known


def test_an_underscore_in_a_command_name_is_read_as_a_hyphen_for_telegrams_menu() -> None:
    """Telegram's command menu (``setMyCommands``) takes ``[a-z0-9_]`` names only: ``/approve_session``
    from the menu is the kit's ``approve-session``, typed or pressed alike."""
    command = parse_command("/approve_session r1")
    assert command is not None and command.known and command.name == "approve-session"
    assert command == parse_command("/approve-session r1") == parse_command("approve-session r1", prefix="")
