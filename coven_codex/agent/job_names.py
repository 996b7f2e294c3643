"""What names a job in the journal (the sessions bound jobs by their own pool; kept light, no imports)."""

JOB_PREFIX = "job:"
"""Conversations named ``job:<id>`` are jobs (docs/jobs.md): bounded by ``max_jobs``, not ``max_sessions``."""
TURN_STARTED = "turn_started"
TURN_COMPLETED = "turn_completed"
TURN_FAILED = "turn_failed"
TURN_ABORTED = "turn_aborted"
"""The turn states a job's record follows (the same strings as :mod:`coven_codex.rollout.translator`'s)."""
