"""Schemathesis over the gateway's own OpenAPI document, on a cluster in auth mode: requests
generated from every operation's schema, valid and invalid, with a tenant's API key (and, for
the admin API, the admin key) never get a 5xx, and every refusal is JSON with a stable `code`
(docs/security.md#bad-input)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from durachat_infra.local.cluster import LocalCluster
from support.fuzz import cases
from support.tenancy import ADMIN, bearer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

CASES = cases(300)

# The reference's plain-text answers on its own routes, kept as it sends them
# (docs/protocol.md#http-routes-gateway).
REFERENCE_ANSWERS = {(400, "Invalid request"), (404, "Not implemented"), (404, "Not found")}


class Api:
    """The gateway under fuzzing: its operations, and who calls them."""

    def __init__(self, url: str, tenant_headers: dict[str, str]) -> None:
        self.url = url
        self.tenant_headers = tenant_headers
        self.session = requests.Session()
        document = httpx.get(f"{url}/openapi.json", headers=tenant_headers, timeout=20)
        assert document.status_code == 200, document.text
        self.schema = schemathesis.openapi.from_dict(document.json())
        self.operations = []
        for result in self.schema.get_all_operations():
            assert isinstance(result, Ok), result
            self.operations.append(result.ok())

    def headers_for(self, path: str) -> dict[str, str]:
        return ADMIN if path.startswith(("/v1/admin", "/v1/cluster")) else self.tenant_headers


@pytest.fixture(scope="module")
def api(auth_cluster: LocalCluster) -> Iterator[Api]:
    url = auth_cluster.urls[0]
    with httpx.Client(base_url=url, timeout=20) as http:
        made = http.post(
            "/v1/admin/tenants", json={"id": f"fuzz-{uuid.uuid4().hex[:8]}"}, headers=ADMIN
        )
        assert made.status_code == 201, made.text
    yield Api(url, bearer(made.json()["api_key"]))


def test_the_document_lists_the_public_routes(api: Api) -> None:
    paths = {operation.path for operation in api.operations}
    assert {"/agents/{agent}/{name}/get-messages", "/v1/tokens", "/v1/admin/tenants"} <= paths
    assert len(api.operations) >= 15


def test_no_generated_request_gets_a_server_error(api: Api) -> None:
    strategies = [
        operation.as_strategy(generation_mode=mode)
        for operation in api.operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    ]
    seen: dict[int, int] = {}

    @settings(
        max_examples=CASES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=st.one_of(strategies))
    def check(case: Any) -> None:
        headers = {**(case.headers or {}), **api.headers_for(case.operation.path)}
        response = case.call(base_url=api.url, session=api.session, headers=headers, timeout=20)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        described = f"{case.method} {case.formatted_path} -> {response.status_code}"
        assert response.status_code < 500, f"{described}: {response.text[:300]}"
        reference = (response.status_code, response.text) in REFERENCE_ANSWERS
        if response.status_code >= 400 and not reference and case.method != "HEAD":
            try:
                body = response.json()
            except ValueError:
                body = None
            assert isinstance(body, dict) and isinstance(body.get("code"), str), (
                f"{described}: {response.text[:300]}"
            )

    check()
    # The generated requests reached the routes, not only the refusals.
    assert any(status < 300 for status in seen), seen
