"""`durachat admin`: manage tenants and their keys through a gateway's admin API
(docs/security.md#the-admin-api).

durachat admin tenants create acme --quota connections=100   prints the tenant and its API key
durachat admin tenants list | show ID | update ID ... | delete ID --yes
durachat admin keys create TENANT [--label L]                another API key (rotation)
durachat admin keys revoke TENANT KEY_ID
durachat admin signing-keys rotate TENANT [--overlap SECONDS]
durachat admin signing-keys remove TENANT KEY_ID

The admin key comes from `--admin-key` or `DURACHAT_ADMIN_KEY`; answers are printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx

from durachat.client.urls import HTTP_TIMEOUT

__all__ = ["add_admin_commands", "run_admin"]

_QUOTAS = (
    "connections",
    "concurrent_turns",
    "turns_per_minute",
    "conversations",
    "tokens_per_day",
    "max_message_bytes",
    "max_messages_per_request",
)


def add_admin_commands(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser,
) -> None:
    """Add `admin` and its subcommands to the `durachat` parser (`common` holds `--url`)."""
    admin = commands.add_parser(
        "admin",
        help="manage tenants and keys (admin key needed)",
        description="Manage tenants, API keys and token signing keys through the admin API.",
    )
    auth = argparse.ArgumentParser(add_help=False, parents=[_url_only(common)])
    auth.add_argument(
        "--admin-key",
        default=os.environ.get("DURACHAT_ADMIN_KEY"),
        help="the admin key (default: $DURACHAT_ADMIN_KEY)",
    )
    areas = admin.add_subparsers(dest="area", required=True, metavar="AREA")

    tenants = areas.add_parser("tenants", help="create, list, show, update, delete tenants")
    actions = tenants.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[auth], help="create a tenant")
    create.add_argument("tenant", help="lowercase letters, digits and '-'")
    _tenant_options(create)
    actions.add_parser("list", parents=[auth], help="list the tenants")
    show = actions.add_parser("show", parents=[auth], help="a tenant, its keys and usage")
    show.add_argument("tenant")
    update = actions.add_parser("update", parents=[auth], help="change quotas, settings, name")
    update.add_argument("tenant")
    _tenant_options(update)
    delete = actions.add_parser(
        "delete", parents=[auth], help="delete a tenant and all its conversations"
    )
    delete.add_argument("tenant")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    keys = areas.add_parser("keys", help="create and revoke API keys")
    key_actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    new_key = key_actions.add_parser("create", parents=[auth], help="another API key")
    new_key.add_argument("tenant")
    new_key.add_argument("--label", default=None, help="what the key is for")
    revoke = key_actions.add_parser("revoke", parents=[auth], help="revoke an API key")
    revoke.add_argument("tenant")
    revoke.add_argument("key_id")

    signing = areas.add_parser("signing-keys", help="rotate the keys client tokens are signed with")
    signing_actions = signing.add_subparsers(dest="action", required=True, metavar="ACTION")
    rotate = signing_actions.add_parser("rotate", parents=[auth], help="a new signing key")
    rotate.add_argument("tenant")
    rotate.add_argument(
        "--overlap", type=float, default=None, help="seconds the old keys keep verifying tokens"
    )
    remove = signing_actions.add_parser("remove", parents=[auth], help="remove a signing key now")
    remove.add_argument("tenant")
    remove.add_argument("key_id")


def _url_only(common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    for action in common._actions:
        if "--url" in action.option_strings:
            parser.add_argument("--url", default=action.default, help=action.help)
    return parser


def _tenant_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=None, help="a display name")
    parser.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"a quota ({', '.join(_QUOTAS)}); 0 is no limit, 'default' removes an override",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a setting (a JSON value, or text); NAME=null removes it",
    )


class AdminError(Exception):
    """A request the command could not make or the server refused."""


def run_admin(args: argparse.Namespace) -> int:
    """Run one `durachat admin` command; returns the exit status."""
    if not args.admin_key:
        _err("error: no admin key: pass --admin-key or set DURACHAT_ADMIN_KEY")
        return 2
    try:
        method, path, body = _request(args)
        if method is None:
            return 1
        answer = _call(args.url, args.admin_key, method, path, body)
    except AdminError as exc:
        _err(f"error: {exc}")
        return 1
    print(json.dumps(answer, indent=2, ensure_ascii=False), flush=True)
    return 0


def _request(args: argparse.Namespace) -> tuple[str | None, str, dict[str, Any] | None]:
    tenant = getattr(args, "tenant", None)
    base = "/v1/admin/tenants"
    match (args.area, args.action):
        case ("tenants", "create"):
            body: dict[str, Any] = {"id": tenant, **_changes(args, removing=False)}
            return "POST", base, body
        case ("tenants", "list"):
            return "GET", base, None
        case ("tenants", "show"):
            return "GET", f"{base}/{tenant}", None
        case ("tenants", "update"):
            return "PATCH", f"{base}/{tenant}", _changes(args, removing=True)
        case ("tenants", "delete"):
            if not args.yes and not _confirm(f"delete tenant {tenant!r} and all its data?"):
                return None, "", None
            return "DELETE", f"{base}/{tenant}", None
        case ("keys", "create"):
            return "POST", f"{base}/{tenant}/keys", {"label": args.label}
        case ("keys", "revoke"):
            return "DELETE", f"{base}/{tenant}/keys/{args.key_id}", None
        case ("signing-keys", "rotate"):
            return "POST", f"{base}/{tenant}/signing-keys", {"overlap_s": args.overlap}
        case ("signing-keys", "remove"):
            return "DELETE", f"{base}/{tenant}/signing-keys/{args.key_id}", None
    raise AdminError(f"unknown command {args.area} {args.action}")


def _changes(args: argparse.Namespace, *, removing: bool) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.name is not None:
        body["name"] = args.name
    quotas: dict[str, int | None] = {}
    for item in args.quota:
        name, _, value = item.partition("=")
        if name not in _QUOTAS:
            raise AdminError(f"unknown quota {name!r}: one of {', '.join(_QUOTAS)}")
        if value == "default" and removing:
            quotas[name] = None
            continue
        try:
            quotas[name] = int(value)
        except ValueError as exc:
            raise AdminError(f"quota {name} needs a whole number, not {value!r}") from exc
    if quotas:
        body["quotas"] = quotas
    settings: dict[str, Any] = {}
    for item in args.setting:
        name, _, value = item.partition("=")
        if not name:
            raise AdminError(f"a setting is NAME=JSON, not {item!r}")
        try:
            settings[name] = json.loads(value)
        except ValueError:
            settings[name] = value
    if settings:
        body["settings"] = settings
    return body


def _call(url: str, key: str, method: str, path: str, body: dict[str, Any] | None) -> Any:
    try:
        response = httpx.request(
            method,
            url.rstrip("/") + path,
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=HTTP_TIMEOUT,
        )
    except httpx.HTTPError as exc:
        message = f"{method} {path} failed: {exc} (is the server running at {url}?)"
        raise AdminError(message) from exc
    try:
        answer = response.json()
    except ValueError:
        answer = response.text
    if response.status_code >= 400:
        if isinstance(answer, dict) and "code" in answer:
            raise AdminError(f"{response.status_code} {answer['code']}: {answer.get('message')}")
        raise AdminError(f"{response.status_code}: {json.dumps(answer)[:500]}")
    return answer


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        _err(f"{question} Pass --yes to confirm.")
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
