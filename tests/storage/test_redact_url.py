"""Memo URLs are written and printed without their password or the run's memo secret."""

from __future__ import annotations

import pytest

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.url import check_memo_url, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cr3t@head:6379/0", "redis://:***@head:6379/0"),
        ("redis://alice:s3cr3t@head:6379/0", "redis://alice:***@head:6379/0"),
        ("rediss://alice:p@s3cr3t@head:6379/0", "rediss://alice:***@head:6379/0"),
        ("--memo-url=redis://:s3cr3t@head:6379/0", "--memo-url=redis://:***@head:6379/0"),
        ("unix:///run/redis.sock?db=0&password=s3cr3t", "unix:///run/redis.sock?db=0&password=***"),
        ("redis://head:6379/0?mugraph_key=s3cr3t", "redis://head:6379/0?mugraph_key=***"),
        ("at redis://u:s3cr3t@a:1/0 and redis://:s3cr3t@b:2/0.", "at redis://u:***@a:1/0 and redis://:***@b:2/0."),
        ("redis://head:6379/0", "redis://head:6379/0"),
        # a lone user part: redis-py's user name, but as often a password missing its colon
        ("redis://s3cr3t@head:6379/0", "redis://***@head:6379/0"),
        ("redis://s3cr3t:@head:6379/0", "redis://***:***@head:6379/0"),  # the colon on the wrong side
        (
            "cannot reach redis://s3cr3t@h:1/0 (PING on redis://s3cr3t@h:1/0)",
            "cannot reach redis://***@h:1/0 (PING on redis://***@h:1/0)",
        ),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        ("local", "local"),
        ("lora", "lora"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cr3t" not in redact_url(url)


@pytest.mark.parametrize(
    "url",
    ["redis://:s3cr3t@head:99999/0", "redis://:s3cr3t@head:6379/x", "http://:s3cr3t@head:1/0", "redis://:s3cr3t@:1/0"],
)
def test_a_bad_memo_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(MugraphError) as info:
        check_memo_url(url)
    assert "s3cr3t" not in str(info.value) and "***" in str(info.value)
