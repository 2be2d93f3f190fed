"""Browser sessions for the web UI: a signed cookie and CSRF tokens bound to it.

A browser cannot send ``Authorization: Bearer`` on a link or a form, so the
login form takes the same tokens the API does and answers with a session
cookie (HttpOnly: scripts never see it; SameSite=Strict: another site's page
cannot make the browser send it; Secure over https). The cookie holds no
token: a random session id, an expiry, and for a signed-in session
HMAC(key, SHA-256(token)), which `TokenSet.role_of_fingerprint` maps back to
the token's role on every request, so removing a token ends its sessions and
a role is never stored where it could go stale. The whole value is signed
with HMAC-SHA256; a cookie that does not verify is ignored.

Every form carries a CSRF token, HMAC(key, session id): a POST whose token
does not match the session that sent it is refused (403) before anything
else happens. Visitors get a session (signed in or not) on their first page,
so the login form itself is protected too, and signing in issues a new
session id (no session fixation).

The key comes from `create_app(ui_secret=...)` or ``DURABLE_UI_SECRET``;
without either, a random key per process (sessions end when it restarts, and
several server processes behind one address need the same secret).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import ConfigurationError

COOKIE_NAME = "durable_ui"
#: How long a session lasts after signing in (or after the first page, unsigned).
SESSION_SECONDS = 12 * 3600
_MIN_SECRET_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def session_key(secret: str | bytes | None, environ: Mapping[str, str] | None = None) -> bytes:
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


@dataclass(frozen=True)
class Session:
    """One browser's session: its id, the token fingerprint when signed in, its expiry."""

    sid: str
    fingerprint: bytes | None
    expires: int

    @property
    def signed_in(self) -> bool:
        return self.fingerprint is not None


class SessionCodec:
    """Makes, signs, reads and checks sessions and their CSRF tokens."""

    def __init__(self, key: bytes, lifetime: int = SESSION_SECONDS) -> None:
        self._key = key
        self.lifetime = lifetime

    @property
    def key(self) -> bytes:
        return self._key

    def new(self, fingerprint: bytes | None = None, now: float | None = None) -> Session:
        moment = time.time() if now is None else now
        return Session(secrets.token_hex(16), fingerprint, int(moment) + self.lifetime)

    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._key, b"durable-ui-session|" + payload.encode("ascii"),
                       hashlib.sha256).digest()
        return _b64(mac)

    def encode(self, session: Session) -> str:
        body = {"sid": session.sid, "exp": session.expires,
                "fp": _b64(session.fingerprint) if session.fingerprint else None}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"v1.{payload}.{self._sign(payload)}"

    def decode(self, value: str | None, now: float | None = None) -> Session | None:
        """The session a cookie holds, or None (absent, forged, malformed or expired)."""
        if not value or not value.isascii():
            # a cookie this codec wrote is ASCII; anything else (a byte a proxy
            # or an extension mangled) is no session, never an error page
            return None
        parts = value.split(".")
        if len(parts) != 3 or parts[0] != "v1":
            return None
        _, payload, signature = parts
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            body = json.loads(_unb64(payload))
            sid, expires, fp = str(body["sid"]), int(body["exp"]), body.get("fp")
            fingerprint = _unb64(fp) if isinstance(fp, str) else None
        except (ValueError, KeyError, TypeError):
            return None
        if expires < (time.time() if now is None else now):
            return None
        return Session(sid, fingerprint, expires)

    def csrf_token(self, session: Session) -> str:
        mac = hmac.new(self._key, b"durable-ui-csrf|" + session.sid.encode("ascii"),
                       hashlib.sha256).digest()
        return _b64(mac)

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        if not presented:
            return False
        return hmac.compare_digest(self.csrf_token(session), presented)
