"""The conversation core: one conversation's state machine and the parts its task owns."""
