"""Virtual keys end to end: issued through the admin API, used with the openai SDK, refused once
revoked, disabled or expired, held to their groups and caps; the admin API's own door and its
answers to bad input. Real loopback sockets, a real SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from asgi_router import ModelRouter

from .conftest import CLIENT_KEY, host_app, make_settings
from .doubles import RecordSink
from .metrics_helpers import Scrape
from .mock_upstream import MockUpstream
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

ADMIN_KEY = "admin-key-0123456789abcdef"
CHAT: dict[str, Any] = {"model": "mock/ok", "messages": [{"role": "user", "content": "hi"}]}


def keys_settings(upstream: MockUpstream, ledger: Path, **overrides: Any) -> Any:
    overrides.setdefault("allow_unauthenticated", False)
    return make_settings(  # type: ignore[attr-defined]
        upstream.url, admin_keys=[ADMIN_KEY], ledger_url=f"sqlite:///{ledger}", **overrides
    )


@pytest.fixture
def records() -> RecordSink:
    return RecordSink()


@pytest.fixture
def served(upstream: MockUpstream, tmp_path: Path, records: RecordSink) -> Iterator[ServerThread]:
    settings = keys_settings(
        upstream, tmp_path / "ledger.db", aliases={"fast": "mock/ok"}, routes=["/v1/chat/completions", "/v1/messages"]
    )
    with ServerThread(ModelRouter(host_app(), settings=settings, sinks=[records])) as server:
        yield server


@pytest.fixture
async def admin(served: ServerThread) -> AsyncIterator[httpx2.AsyncClient]:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx2.AsyncClient(base_url=f"{served.url}/admin", headers=headers) as client:
        yield client


def sdk_for(server: ServerThread, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0)


async def create(admin: httpx2.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await admin.post("/keys", json={"caller": "team-a", **fields})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_a_created_key_serves_the_sdk_as_its_caller_and_its_secret_is_shown_once(
    served: ServerThread, admin: httpx2.AsyncClient, records: RecordSink
) -> None:
    key = await create(admin, name="ci")
    secret = key["secret"]
    assert secret.startswith("sk-ar-") and len(secret) >= 6 + 32
    assert key["prefix"] == f"sk-ar-{secret[6:12]}...{secret[-4:]}"
    assert set(key) == {
        "id", "caller", "name", "groups", "usd_per_day", "tokens_per_day", "rpm", "downgrade_to", "hard_limit",
        "expires_at", "metadata", "disabled", "revoked", "prefix", "created_at", "secret",
    }  # fmt: skip
    async with sdk_for(served, secret) as sdk:
        answer = await sdk.chat.completions.with_raw_response.create(**CHAT)
    assert answer.http_response.status_code == 200
    request_id = answer.http_response.headers["x-request-id"]
    await eventually(lambda: any(record.request_id == request_id for record in records))
    record = records.of(request_id)
    assert record.principal == "team-a"
    assert record.key_id == key["id"]
    listed = (await admin.get("/keys")).json()["data"]
    assert [shown["id"] for shown in listed] == [key["id"]]
    assert secret not in (await admin.get("/keys")).text and secret not in (await admin.get(f"/keys/{key['id']}")).text


async def test_a_revoked_key_gets_401_invalid_api_key_and_delete_answers_204(
    served: ServerThread, admin: httpx2.AsyncClient
) -> None:
    key = await create(admin)
    async with sdk_for(served, key["secret"]) as sdk:
        await sdk.chat.completions.create(**CHAT)
        assert (await admin.delete(f"/keys/{key['id']}")).status_code == 204
        with pytest.raises(openai.AuthenticationError) as caught:
            await sdk.chat.completions.create(**CHAT)
    assert caught.value.code == "invalid_api_key"
    assert (await admin.get(f"/keys/{key['id']}")).json()["revoked"] is True


async def test_a_disabled_key_is_refused_until_enabled_again(served: ServerThread, admin: httpx2.AsyncClient) -> None:
    key = await create(admin)
    async with sdk_for(served, key["secret"]) as sdk:
        assert (await admin.patch(f"/keys/{key['id']}", json={"disabled": True})).json()["disabled"] is True
        with pytest.raises(openai.AuthenticationError):
            await sdk.chat.completions.create(**CHAT)
        await admin.patch(f"/keys/{key['id']}", json={"disabled": False})
        await sdk.chat.completions.create(**CHAT)


async def test_an_expired_key_is_refused(served: ServerThread, admin: httpx2.AsyncClient) -> None:
    key = await create(admin, expires_at="2020-01-01T00:00:00Z")
    assert key["expires_at"] == "2020-01-01T00:00:00Z"
    async with sdk_for(served, key["secret"]) as sdk:
        with pytest.raises(openai.AuthenticationError):
            await sdk.chat.completions.create(**CHAT)


async def test_an_unknown_virtual_key_and_a_config_style_key_are_refused(served: ServerThread) -> None:
    for secret in ("sk-ar-" + "x" * 43, CLIENT_KEY):
        async with sdk_for(served, secret) as sdk:
            with pytest.raises(openai.AuthenticationError):
                await sdk.chat.completions.create(**CHAT)


async def test_a_key_outside_its_groups_gets_403_model_not_allowed_and_aliases_count_as_their_target(
    served: ServerThread, admin: httpx2.AsyncClient
) -> None:
    key = await create(admin, groups=["fast"])
    async with sdk_for(served, key["secret"]) as sdk:
        await sdk.chat.completions.create(**CHAT)  # mock/ok is what fast names
        await sdk.chat.completions.create(**{**CHAT, "model": "fast"})
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await sdk.chat.completions.create(**{**CHAT, "model": "mock2/ok"})
    assert caught.value.code == "model_not_allowed"
    async with anthropic.AsyncAnthropic(base_url=served.url, api_key=key["secret"], max_retries=0) as claude:
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            await claude.messages.create(model="mock2/ok", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["message"].startswith("model_not_allowed")  # type: ignore[index]


async def test_a_keys_own_rpm_cap_refuses_with_429_caller_limit_reached(
    served: ServerThread, admin: httpx2.AsyncClient
) -> None:
    key = await create(admin, rpm=1)
    async with sdk_for(served, key["secret"]) as sdk:
        await sdk.chat.completions.create(**CHAT)
        with pytest.raises(openai.RateLimitError) as caught:
            await sdk.chat.completions.create(**CHAT)
    assert caught.value.code == "caller_limit_reached"
    assert key["id"] in caught.value.message


async def test_a_rotated_key_takes_the_new_secret_and_the_old_one_only_within_its_grace(
    served: ServerThread, admin: httpx2.AsyncClient
) -> None:
    key = await create(admin)
    rotated = (await admin.post(f"/keys/{key['id']}/rotate", json={"grace": 3600})).json()
    assert rotated["secret"] != key["secret"] and rotated["id"] == key["id"]
    for secret in (key["secret"], rotated["secret"]):
        async with sdk_for(served, secret) as sdk:
            await sdk.chat.completions.create(**CHAT)
    again = (await admin.post(f"/keys/{key['id']}/rotate", json={})).json()
    for secret in (key["secret"], rotated["secret"]):
        async with sdk_for(served, secret) as sdk:
            with pytest.raises(openai.AuthenticationError):
                await sdk.chat.completions.create(**CHAT)
    async with sdk_for(served, again["secret"]) as sdk:
        await sdk.chat.completions.create(**CHAT)


# --- the admin API's door and its answers to bad input -----------------------------------------


async def test_admin_routes_open_only_to_admin_keys_and_admin_keys_open_no_chat_route(
    served: ServerThread, admin: httpx2.AsyncClient
) -> None:
    key = await create(admin)
    async with httpx2.AsyncClient(base_url=served.url) as anyone:
        for presented in ("wrong-key-0123456789", key["secret"]):
            refused = await anyone.get("/admin/keys", headers={"Authorization": f"Bearer {presented}"})
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
        chat = await anyone.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert chat.status_code == 401


async def test_ten_failed_admin_authentications_lock_the_address_out_with_429(
    served: ServerThread, admin: httpx2.AsyncClient
) -> None:
    async with httpx2.AsyncClient(base_url=served.url) as guesser:
        statuses = [
            (await guesser.get("/admin/keys", headers={"x-api-key": f"guess-{n:020d}"})).status_code for n in range(10)
        ]
    assert statuses == [401] * 10
    locked = await admin.get("/keys")  # the right key too, from the same address
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 59


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"caller": "team-a", "rmp": 3}, 400, "rmp"),
        ({"caller": "team a"}, 422, "caller"),
        ({"caller": "team-a", "rpm": 0}, 422, "rpm"),
        ({"caller": "team-a", "expires_at": "tomorrow"}, 422, "expires_at"),
        ({"caller": "team-a", "metadata": {"x": "y" * 5000}}, 422, "metadata"),
        ({"caller": "team-a", "groups": ["not a ref"]}, 422, "groups"),
        ({"name": "no caller"}, 422, "caller"),
    ],
)
async def test_bad_admin_input_is_refused_naming_the_field(
    admin: httpx2.AsyncClient, body: dict[str, Any], status: int, param: str
) -> None:
    refused = await admin.post("/keys", json=body)
    assert refused.status_code == status
    assert refused.json()["error"]["param"] == param


async def test_a_duplicate_name_is_409_an_unknown_id_404_and_a_body_not_json_400(admin: httpx2.AsyncClient) -> None:
    await create(admin, name="ci")
    assert (await admin.post("/keys", json={"caller": "team-a", "name": "ci"})).status_code == 409
    assert (await admin.post("/keys", json={"caller": "team-b", "name": "ci"})).status_code == 201
    for method in ("GET", "PATCH", "DELETE"):
        missing = await admin.request(method, "/keys/vk_nothing", json={} if method == "PATCH" else None)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "key_not_found"
    assert (await admin.post("/keys/vk_nothing/rotate", json={})).status_code == 404
    assert (await admin.post("/keys", content=b"{not json")).status_code == 400
    assert (await admin.post("/keys/x/rotate", json={"grace": -1})).status_code == 422


async def test_a_keys_own_daily_cap_survives_a_restart(upstream: MockUpstream, tmp_path: Path) -> None:
    settings = keys_settings(upstream, tmp_path / "ledger.db")
    usage = {**CHAT, "model": "mock/usage-100"}  # 103 tokens an answer
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with ServerThread(ModelRouter(host_app(), settings=settings)) as first:
        async with httpx2.AsyncClient(base_url=f"{first.url}/admin", headers=headers) as admin:
            key = await create(admin, tokens_per_day=150)
        async with sdk_for(first, key["secret"]) as sdk:
            await sdk.chat.completions.create(**usage)  # 103 of 150
    with ServerThread(ModelRouter(host_app(), settings=settings)) as second:
        async with sdk_for(second, key["secret"]) as sdk:
            await sdk.chat.completions.create(**usage)  # 206: started under the cap
            with pytest.raises(openai.RateLimitError) as caught:
                await sdk.chat.completions.create(**usage)  # past it: the first process's 103 counted
    assert caught.value.code == "caller_limit_reached"


async def test_a_caller_named_by_a_virtual_key_has_a_metric_label_of_its_own(
    upstream: MockUpstream, tmp_path: Path
) -> None:
    settings = keys_settings(upstream, tmp_path / "ledger.db", callers={"*": {"rpm": 1000}}, metrics_route="/metrics")
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with ServerThread(ModelRouter(host_app(), settings=settings)) as served:
        async with httpx2.AsyncClient(base_url=f"{served.url}/admin", headers=headers) as admin:
            key = await create(admin, caller="team-z")
        async with sdk_for(served, key["secret"]) as sdk:
            await sdk.chat.completions.create(**CHAT)
        scrape = Scrape(httpx2.get(f"{served.url}/metrics", headers={"Authorization": f"Bearer {key['secret']}"}).text)
    assert scrape.labels("asgi_router_caller_requests_total", "caller") == {"team-z"}  # not "other"


async def test_a_virtual_keys_request_is_held_by_its_callers_caps_as_well_as_its_own(
    upstream: MockUpstream, tmp_path: Path
) -> None:
    # team-a may make 2 requests a minute, whichever of its keys makes them; a key without caps
    # of its own is still its caller's.
    settings = keys_settings(upstream, tmp_path / "ledger.db", callers={"team-a": {"rpm": 2}})
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with ServerThread(ModelRouter(host_app(), settings=settings)) as served:
        async with httpx2.AsyncClient(base_url=f"{served.url}/admin", headers=headers) as admin:
            first, second, other = (
                await create(admin),
                await create(admin, rpm=100),
                await create(admin, caller="team-b"),
            )
        async with sdk_for(served, first["secret"]) as sdk:
            await sdk.chat.completions.create(**CHAT)
        async with sdk_for(served, second["secret"]) as sdk:
            await sdk.chat.completions.create(**CHAT)
            with pytest.raises(openai.RateLimitError) as caught:
                await sdk.chat.completions.create(**CHAT)  # the key's own rpm is far; its caller's is not
        async with sdk_for(served, other["secret"]) as sdk:
            await sdk.chat.completions.create(**CHAT)  # another caller's key is not held
    assert caught.value.code == "caller_limit_reached"
    assert "team-a" in caught.value.message


async def test_spend_over_the_admin_api_groups_by_key_caller_model_and_day_as_json_or_csv(
    upstream: MockUpstream, tmp_path: Path
) -> None:
    settings = keys_settings(upstream, tmp_path / "ledger.db", ledger_flush_interval=0.05)
    usage = {**CHAT, "model": "mock/usage-100"}  # 100 prompt and 3 completion tokens an answer
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with ServerThread(ModelRouter(host_app(), settings=settings)) as served:
        async with httpx2.AsyncClient(base_url=f"{served.url}/admin", headers=headers) as admin:
            a, b = await create(admin), await create(admin, caller="team-b")
            for key, times in ((a, 2), (b, 1)):
                async with sdk_for(served, key["secret"]) as sdk:
                    for _ in range(times):
                        await sdk.chat.completions.create(**usage)

            async def by(group: str, **query: str) -> list[dict[str, Any]]:
                answer = await admin.get("/spend", params={"by": group, **query})
                assert answer.status_code == 200, answer.text
                assert answer.json()["by"] == group
                rows: list[dict[str, Any]] = answer.json()["rows"]
                return rows

            async def written() -> bool:
                return sum(row["requests"] for row in await by("caller", since="1d")) == 3

            await eventually(written)
            per_key = {
                row["key"]: (row["requests"], row["input_tokens"], row["output_tokens"]) for row in await by("key")
            }
            assert per_key == {a["id"]: (2, 200, 6), b["id"]: (1, 100, 3)}
            assert [(row["caller"], row["requests"]) for row in await by("caller", since="12h")] == [
                ("team-a", 2), ("team-b", 1)
            ]  # fmt: skip
            assert [(row["model"], row["requests"]) for row in await by("model")] == [("mock/usage-100", 3)]
            assert [row["requests"] for row in await by("day", since="2020-01-01", until="2999-01-01T00:00:00Z")] == [3]
            assert await by("caller", until="2020-01-01") == []
            as_csv = await admin.get("/spend", params={"by": "caller"}, headers={"Accept": "text/csv"})
            assert as_csv.headers["content-type"].startswith("text/csv")
            lines = as_csv.text.splitlines()
            assert lines[0] == "caller,requests,input_tokens,output_tokens,cached_tokens,cost_usd"
            assert [line.split(",")[:4] for line in lines[1:]] == [
                ["team-a", "2", "200", "6"],
                ["team-b", "1", "100", "3"],
            ]
            for query, param in (({"by": "week"}, "by"), ({"since": "last week"}, "since"), ({"from": "1d"}, "from")):
                refused = await admin.get("/spend", params=query)
                assert refused.status_code in (400, 422) and refused.json()["error"]["param"] == param


async def test_with_authorize_virtual_keys_are_checked_first_and_authorize_gets_the_rest(
    upstream: MockUpstream, tmp_path: Path
) -> None:
    asked: list[str | None] = []

    def authorize(scope: Any, headers: Any) -> object:
        asked.append(headers.get("authorization"))
        return "host-user" if headers.get("authorization") == "Bearer host-session-token" else False

    settings = keys_settings(upstream, tmp_path / "ledger.db", authorize=authorize)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    records = RecordSink()
    with ServerThread(ModelRouter(host_app(), settings=settings, sinks=[records])) as served:
        async with httpx2.AsyncClient(base_url=f"{served.url}/admin", headers=headers) as admin:
            key = await create(admin)
        async with sdk_for(served, key["secret"]) as sdk:
            await sdk.chat.completions.create(**CHAT)
        async with sdk_for(served, "host-session-token") as sdk:
            await sdk.chat.completions.create(**CHAT)
        async with sdk_for(served, "sk-ar-" + "x" * 43) as sdk:  # a virtual key's form, known nowhere
            with pytest.raises(openai.AuthenticationError):
                await sdk.chat.completions.create(**CHAT)
        await eventually(lambda: len(records) == 3)
    assert asked == ["Bearer host-session-token", "Bearer sk-ar-" + "x" * 43]  # never the virtual key's
    assert [record.principal for record in records][:2] == ["team-a", "host-user"]
