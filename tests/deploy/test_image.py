"""The container image's Dockerfile: hadolint finds nothing, and the final stage is lean and
runs as a non-root user."""

from __future__ import annotations

import re
import subprocess

from support.deploy_manifests import BIN, DOCKERFILE, ROOT, image_env


def _stages() -> dict[str, str]:
    text = DOCKERFILE.read_text()
    parts = re.split(r"(?m)^FROM\s+\S+(?:\s+AS\s+(\w+))?\s*$", text)
    # re.split keeps the stage names: [preamble, name1, body1, name2, body2, ...]
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    # The one finding it is told to skip is explained where it is skipped.
    ignores = re.findall(r"(?m)^# hadolint ignore=(\S+)$", DOCKERFILE.read_text())
    assert ignores == ["DL3008"]


def test_the_image_installs_the_lock_file_with_uv_and_no_dev_tools() -> None:
    build = _stages()["build"]
    syncs = re.findall(r"uv sync ([^\n]+)", build)
    assert len(syncs) == 2
    for options in syncs:
        assert "--no-dev" in options and "--no-editable" in options
    assert "UV_FROZEN=1" in build  # uv.lock as it is, never re-resolved
    assert "--mount=type=cache,target=/root/.cache/uv" in build  # no cache in any layer


def test_the_final_stage_has_no_compiler_cache_or_root_user() -> None:
    runtime = _stages()["runtime"]
    assert "apt-get" not in runtime and "pip install" not in runtime and "/uv" not in runtime
    assert re.search(r"(?m)^USER \$\{UID\}:\$\{UID\}$", runtime)
    assert re.search(r"(?m)^ARG UID=(\d+)$", runtime).group(1) != "0"  # type: ignore[union-attr]
    assert "COPY --from=build /opt/durachat /opt/durachat" in runtime
    assert image_env()["PATH"].startswith("/opt/durachat/bin")


def test_the_image_has_every_entry_point() -> None:
    scripts = "".join(p.read_text() for p in ROOT.glob("*/*/pyproject.toml"))
    for command in ("durachat-gateway", "durachat-shard", "durachat-jobs", "durachat-migrate"):
        assert f"{command} = " in scripts
    assert 'durachat = "durachat.client.cli:main"' in scripts
    for command in ("durachat-gateway", "durachat-shard", "durachat-jobs", "durachat-migrate"):
        assert (BIN / command).exists()


def test_the_build_context_is_the_sources_only() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") :][:5] == [
        "*",
        "!pyproject.toml",
        "!uv.lock",
        "!libs/",
        "!services/",
    ]
    copied = re.findall(r"(?m)^COPY (?!--from)(\S+)", DOCKERFILE.read_text())
    allowed = ("pyproject.toml", "uv.lock", "libs", "services")
    assert all(path.startswith(allowed) for path in copied), copied
