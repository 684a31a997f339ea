"""HS256 JSON Web Tokens with the claims Speechly's login issued (appId/projectId, deviceId,
scope, iat, exp)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any, Dict


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenError(Exception):
    def __init__(self, message: str, expired: bool = False):
        super().__init__(message)
        self.expired = expired


def issue(secret: bytes, claims: Dict[str, Any], validity_s: int) -> Dict[str, Any]:
    now = int(time.time())
    payload = dict(claims, iat=now, exp=now + validity_s)
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    sig = _b64(hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return {"token": f"{head}.{body}.{sig}", "exp": payload["exp"]}


def verify(secret: bytes, token: str) -> Dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("malformed token")
    expected = _b64(hmac.new(secret, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(expected, parts[2]):
        raise TokenError("bad token signature")
    try:
        header = json.loads(_unb64(parts[0]))
    except ValueError as e:
        raise TokenError(f"malformed token header: {e}") from e
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise TokenError("token algorithm is not HS256")
    try:
        claims = json.loads(_unb64(parts[1]))
    except ValueError as e:
        raise TokenError(f"malformed token payload: {e}") from e
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int):
        raise TokenError("token has no exp claim")
    if claims["exp"] <= time.time():
        raise TokenError(f"token expired at {claims['exp']} (unix seconds): log in again", expired=True)
    return claims
