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
several server processes behind one address need the same secret); the
signatures are `durable.http.signing`'s, the server's one mechanism.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

from ..signing import b64 as _b64
from ..signing import secret_key as session_key
from ..signing import sign, verify
from ..signing import unb64 as _unb64

__all__ = ["COOKIE_NAME", "SESSION_SECONDS", "Session", "SessionCodec", "session_key"]

COOKIE_NAME = "durable_ui"
#: How long a session lasts after signing in (or after the first page, unsigned).
SESSION_SECONDS = 12 * 3600


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
        return sign(self._key, b"durable-ui-session", payload)

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
        if not verify(self._key, b"durable-ui-session", payload, signature):
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
        return sign(self._key, b"durable-ui-csrf", session.sid)

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        if not presented:
            return False
        return verify(self._key, b"durable-ui-csrf", session.sid, presented)
