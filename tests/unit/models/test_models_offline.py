"""The model layer never reaches the network, and its public surface is pinned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import durachat.models

# Runs in a fresh interpreter so that litellm's import-time behaviour is observed too. Every
# outgoing connection or name lookup to a non-loopback address is recorded and refused.
_SCRIPT = textwrap.dedent(
    """
    import asyncio, ipaddress, json, socket

    attempts = []

    def _loopback(host):
        if host in (None, "", "localhost"):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    def _guard(address):
        if isinstance(address, tuple) and not _loopback(address[0]):
            attempts.append(repr(address))
            raise OSError("network blocked by test")

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    def connect(self, address):
        _guard(address)
        return _connect(self, address)
    def connect_ex(self, address):
        _guard(address)
        return _connect_ex(self, address)
    _getaddrinfo = socket.getaddrinfo
    def getaddrinfo(host, *args, **kwargs):
        if not _loopback(host):
            attempts.append(repr(host))
            raise socket.gaierror("name lookup blocked by test")
        return _getaddrinfo(host, *args, **kwargs)
    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.getaddrinfo = getaddrinfo

    import durachat.models
    from durachat.models import SCRIPTED_MODEL, stream_ui_chunks
    from durachat.models._litellm import litellm

    async def main():
        chunks = [c async for c in stream_ui_chunks(
            SCRIPTED_MODEL, [{"role": "user", "content": "hello world"}]
        )]
        whole = await litellm.acompletion(
            model=SCRIPTED_MODEL, messages=[{"role": "user", "content": "sure"}]
        )
        return chunks, whole.choices[0].message.content

    chunks, whole = asyncio.run(main())
    recorded = list(attempts)
    try:  # the guard itself must work
        socket.create_connection(("192.0.2.1", 80), timeout=1)
    except OSError:
        pass
    print(json.dumps({
        "attempts": recorded,
        "guard_works": len(attempts) > len(recorded),
        "deltas": [c["delta"] for c in chunks if c["type"] == "text-delta"],
        "finish": chunks[-1],
        "whole": whole,
        "callbacks": [
            len(litellm.callbacks), len(litellm.success_callback), len(litellm.failure_callback),
            len(litellm.input_callback), len(litellm._async_success_callback),
            len(litellm._async_failure_callback),
        ],
    }))
    """
)


def test_import_and_scripted_run_make_no_network_calls() -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LITELLM_", "DURACHAT_", "HTTP_PROXY", "HTTPS_PROXY"))
    }
    env["DURACHAT_SCRIPTED_DELAY_SCALE"] = "0"
    completed = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["attempts"] == []
    assert result["guard_works"] is True
    assert result["deltas"] == ["echo: ", "hello ", "world"]
    assert result["finish"] == {"type": "finish", "finishReason": "stop"}
    assert result["whole"] == "Sure"
    assert result["callbacks"] == [0, 0, 0, 0, 0, 0]


def test_public_api() -> None:
    assert sorted(durachat.models.__all__) == [
        "ModelError",
        "SCRIPTED_MODEL",
        "register_scripted_model",
        "stream_ui_chunks",
        "to_chat_messages",
        "warm_up",
    ]
    for name in durachat.models.__all__:
        assert getattr(durachat.models, name) is not None
    assert durachat.models.SCRIPTED_MODEL == "durachat/scripted"
    error = durachat.models.ModelError("detail", public_message="safe")
    assert (str(error), error.message, error.public_message) == ("detail", "detail", "safe")
    assert durachat.models.ModelError("x").public_message == "The model failed to respond."
