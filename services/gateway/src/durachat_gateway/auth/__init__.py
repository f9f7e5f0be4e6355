"""Credentials at the gateway: API keys, client tokens, who a request acts for, and the
middleware that checks every route (docs/security.md)."""
