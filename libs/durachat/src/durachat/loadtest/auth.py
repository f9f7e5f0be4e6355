"""Client tokens for the simulated users, minted with a tenant API key.

`POST /v1/tokens` with `Authorization: Bearer <api key>` and `{"agent", "name", "ttl_s"}`
answers `{"token"}`; the token travels as `?token=` on the WebSocket. Without an API key no
token is asked for (an open cluster). Blocking calls: under Locust, gevent makes them
cooperative.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from durachat.loadtest.frames import http_url

TOKENS_PATH = "/v1/tokens"


class TokenError(Exception):
    """A token could not be minted; `code` is short and stable (`token_401`, `token_failed`)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(code if not detail else f"{code}: {detail}")
        self.code = code


class TokenSource:
    """Mints (and reuses until shortly before they expire) one token per conversation."""

    def __init__(self, host: str, api_key: str | None, *, ttl_s: int = 3600, timeout: float = 10.0):
        """Mint tokens on `host` with `api_key` (None: no tokens)."""
        self._url = http_url(host, TOKENS_PATH)
        self._api_key = api_key
        self._ttl_s = ttl_s
        self._timeout = timeout
        self._cache: dict[tuple[str, str], tuple[str, float]] = {}

    @property
    def enabled(self) -> bool:
        """Whether tokens are minted at all."""
        return self._api_key is not None

    def token(self, agent: str, name: str) -> str | None:
        """A token for the conversation `agent`/`name`, or None without an API key.

        Raises:
            TokenError: the server refused or did not answer.
        """
        if self._api_key is None:
            return None
        cached = self._cache.get((agent, name))
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        body = json.dumps({"agent": agent, "name": name, "ttl_s": self._ttl_s}).encode()
        request = urllib.request.Request(
            self._url,
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {self._api_key}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as exc:
            raise TokenError(f"token_{exc.code}") from exc
        except (OSError, ValueError) as exc:
            raise TokenError("token_failed", str(exc)[:120]) from exc
        token = answer.get("token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenError("token_invalid", "no token in the answer")
        # Reused for most of its life, renewed well before it expires.
        self._cache[(agent, name)] = (token, time.monotonic() + self._ttl_s * 0.8)
        return token
