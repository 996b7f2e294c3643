import pytest

from coven_codex.codex.errors import ErrorCode, classify


@pytest.mark.parametrize(
    ("message", "exit_code", "code"),
    [
        ("anything", 124, ErrorCode.OUTER_TIMEOUT),
        ("401 unauthorized", 137, ErrorCode.KILL_TIMEOUT),
        ('unexpected status 401 Unauthorized: {"error":"bad key"}', 1, ErrorCode.AUTH),
        ("exceeded retry limit, last status: 401 Unauthorized", 1, ErrorCode.AUTH),
        ("Not logged in", None, ErrorCode.AUTH),
        ("exceeded retry limit, last status: 429 Too Many Requests", None, ErrorCode.RATE_LIMIT),
        ("Rate limit reached for requests", None, ErrorCode.RATE_LIMIT),
        ("model_not_found: The model `x` does not exist", None, ErrorCode.MODEL),
        ("error sending request for url (http://127.0.0.1:9/v1/responses)", None, ErrorCode.NETWORK),
        ("stream disconnected before completion: idle timeout waiting for SSE", None, ErrorCode.STREAM_IDLE),
        ("stream disconnected before completion: stream closed before response.completed", None, ErrorCode.STREAM_IDLE),
        ("Reconnecting... 1/5 (stream disconnected before completion)", None, ErrorCode.STREAM_IDLE),
        ("no output from Codex for 540s: stream idle, turn abandoned", None, ErrorCode.STREAM_IDLE),
        # what Codex 0.169 says for a provider's response.failed and for an HTTP 5xx (issue 26, item 13)
        ("stream disconnected before completion: The model had an internal error", None, ErrorCode.PROVIDER_ERROR),
        (
            "We’re currently experiencing high demand, which may cause temporary errors. (internal server error)",
            None,
            ErrorCode.PROVIDER_ERROR,
        ),
        ("exceeded retry limit, last status: 502 Bad Gateway", None, ErrorCode.PROVIDER_ERROR),
        ("stream disconnected before completion: You exceeded your current quota", None, ErrorCode.QUOTA),
        ("stream disconnected before completion: error sending request for url", None, ErrorCode.NETWORK),
        ("You exceeded your current quota", None, ErrorCode.QUOTA),
        ("402 Payment Required", None, ErrorCode.QUOTA),
        ("This model's maximum context length is 8192 tokens", None, ErrorCode.CONTEXT_LENGTH),
        ("sandbox denied the write", None, ErrorCode.SANDBOX),
        ("Permission denied (os error 13)", None, ErrorCode.SANDBOX),
        ("please upgrade to a newer version", None, ErrorCode.VERSION),
        ("something odd", None, ErrorCode.UNKNOWN),
    ],
)
def test_classification_table(message: str, exit_code: int | None, code: ErrorCode) -> None:
    assert classify(message, exit_code).code is code


def test_message_is_cut_to_200_characters_and_has_a_hint() -> None:
    result = classify("401 " + "x" * 500)
    assert len(result.message) == 200
    assert result.message.endswith("…")
    assert "codex login" in result.hint
