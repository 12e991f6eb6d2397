"""The --model-repository that makes Triton read a bucket itself (healer/edges/embedded.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.edges.embedded import is_remote_repository, triton_repository_url


@pytest.mark.parametrize(
    ("bucket", "prefix", "endpoint", "url"),
    [
        ("models", "prod/", None, "s3://models/prod"),
        ("models", "", None, "s3://models"),
        ("b", "/p/q/", "http://127.0.0.1:8333", "s3://http://127.0.0.1:8333/b/p/q"),
        ("b", "p", "http://seaweed.lan/", "s3://http://seaweed.lan:80/b/p"),  # Triton needs the port written
        ("b", "p", "https://minio.lan", "s3://https://minio.lan:443/b/p"),
        ("b", "p", "http://[::1]:9000", "s3://http://[::1]:9000/b/p"),
    ],
)
def test_the_url_names_endpoint_port_bucket_prefix(bucket: str, prefix: str, endpoint: str | None, url: str) -> None:
    assert triton_repository_url(bucket, prefix, endpoint) == url
    assert is_remote_repository(url)


def test_an_endpoint_with_a_path_is_refused() -> None:
    with pytest.raises(ValueError, match="scheme://host:port"):
        triton_repository_url("b", "p", "http://127.0.0.1:8333/s3")


def test_a_directory_is_not_remote() -> None:
    assert not is_remote_repository(Path("/models"))
    assert not is_remote_repository("/models")
