"""The server's key, and HMAC-SHA256 signatures of what it hands out and takes back.

One mechanism for everything the server signs: the web UI's session cookies
and CSRF tokens (`durable.http.ui.session`) and the schedule list's page
tokens (`durable.http.schedule_list`). Each use signs under a purpose of its
own, so a value signed for one is never valid as another.

The key comes from `create_app(ui_secret=...)` or ``DURABLE_UI_SECRET``;
without either, a random key per process: what it signed (sessions, page
tokens) is void once it restarts, and several server processes behind one
address need the same secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping

from ..errors import ConfigurationError

_MIN_SECRET_BYTES = 16


def b64(data: bytes) -> str:
    """URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    """`b64`'s bytes back; ValueError (binascii.Error) for text that is not."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def secret_key(secret: str | bytes | None, environ: Mapping[str, str] | None = None) -> bytes:
    """The signing key: from `secret`, else ``DURABLE_UI_SECRET``, else random."""
    env = os.environ if environ is None else environ
    if secret is None:
        secret = env.get("DURABLE_UI_SECRET") or None
    if secret is None:
        return secrets.token_bytes(32)
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if len(raw) < _MIN_SECRET_BYTES:
        raise ConfigurationError(
            f"the web UI secret (ui_secret= or DURABLE_UI_SECRET) must be at least "
            f"{_MIN_SECRET_BYTES} bytes, got {len(raw)}; generate one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return hashlib.sha256(b"durable-ui-session-key|" + raw).digest()


def sign(key: bytes, purpose: bytes, payload: str) -> str:
    """The signature of `payload` for `purpose` (``b64`` text)."""
    return b64(hmac.new(key, purpose + b"|" + payload.encode("utf-8"), hashlib.sha256).digest())


def verify(key: bytes, purpose: bytes, payload: str, signature: str) -> bool:
    """Whether `signature` is `payload`'s for `purpose` (in constant time)."""
    return hmac.compare_digest(sign(key, purpose, payload).encode("ascii"),
                               signature.encode("utf-8", "replace"))


def seal(key: bytes, purpose: bytes, data: bytes) -> str:
    """`data` and its signature as one URL-safe text: ``<b64 data>.<signature>``."""
    payload = b64(data)
    return f"{payload}.{sign(key, purpose, payload)}"


def unseal(key: bytes, purpose: bytes, text: str) -> bytes | None:
    """The data `seal` signed into `text` with this key and purpose, or None
    (not one it made: another key, another purpose, or changed)."""
    payload, dot, signature = text.partition(".")
    if not dot or not payload or not verify(key, purpose, payload, signature):
        return None
    try:
        return unb64(payload)
    except (binascii.Error, ValueError):
        return None
