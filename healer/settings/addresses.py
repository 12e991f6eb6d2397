"""Addresses and URLs: the one check of every key that holds one, never repeating credentials."""

from __future__ import annotations

import re

# ---- addresses and URLs: the one check of every key that holds one ------------------------------------

URL_SCHEMES = ("http://", "https://")
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)[^/?#]*@")


def redact_url(text: str) -> str:
    """``text`` with any ``user:password@`` replaced by ``***@``: what an error or a log may repeat."""
    return _USERINFO.sub(r"\1***@", text)


def parse_address(text: str, *, url: bool) -> tuple[str, int | None]:
    """(host, port) of an address setting; ValueError says what is wrong (never repeating credentials).

    ``url``: an http(s) URL (a path is allowed; no port: the scheme's, None); otherwise ``host:port``
    with no scheme and no path (triton.url, sidecar.listen). Credentials are refused wherever they
    appear: a URL is logged, printed by `healer probe` and shown in /status."""
    shown = redact_url(text)
    if url:
        if not text.startswith(URL_SCHEMES):
            raise ValueError(f"must start with http:// or https://, got {shown!r}")
        authority = re.split(r"[/?#]", text.split("://", 1)[1], maxsplit=1)[0]
    elif "://" in text or "/" in text or ":" not in text:
        raise ValueError(f"must be host:port without a scheme or path, got {shown!r}")
    else:
        authority = text
    if "@" in authority:
        raise ValueError(
            f"must not carry credentials (user:password@): they would be written to logs and output; got {shown!r}"
        )
    host, port = _host_and_port(authority, shown)
    if not host:
        raise ValueError(f"has no host, got {shown!r}")
    if re.search(r"\s", host):
        raise ValueError(f"has a space in its host, got {shown!r}")
    if port is None:
        if not url:
            raise ValueError(f"must be host:port without a scheme or path, got {shown!r}")
        return host, None
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
        raise ValueError(f"port must be a number from 1 to 65535, got {port!r} in {shown!r}")
    return host, int(port)


def _host_and_port(authority: str, shown: str) -> tuple[str, str | None]:
    """``host[:port]`` or ``[v6][:port]`` split, the port as written (None: none)."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError(f"has an unclosed '[' in its host, got {shown!r}")
        host, rest = authority[1:end], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"must have ':port' right after the ']' of an IPv6 address, got {shown!r}")
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = authority.rpartition(":")
        host, port = (host, port_text) if colon else (authority, None)
        if ":" in host:
            raise ValueError(f"must write an IPv6 address in brackets ([::1]:8000), got {shown!r}")
    return host, port
