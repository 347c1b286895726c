"""docker-compose.yml and the Dockerfile hang together (parsed; no Docker engine needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
INIT_DIR = "/docker-entrypoint-initdb.d/"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment", {})
    if isinstance(raw, list):
        return dict(item.split("=", 1) for item in raw)
    return {name: str(value) for name, value in raw.items()}


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port, from "host:container" or "ip:host:container"."""
    ports = {}
    for spec in service.get("ports", []):
        parts = str(spec).split(":")
        ports[int(parts[-1])] = int(parts[-2])
    return ports


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def worker_command(services: dict[str, Any]) -> list[str]:
    command = services["worker"]["command"]
    assert isinstance(command, list), "use the list form: no shell quoting surprises"
    return [str(part) for part in command]


def test_the_services_and_their_images(services: dict[str, Any]) -> None:
    assert set(services) == {"postgresql", "temporal", "temporal-ui", "worker"}
    assert services["postgresql"]["image"] == "postgres:16"
    assert services["temporal"]["image"].startswith("temporalio/auto-setup:")
    assert services["temporal-ui"]["image"].startswith("temporalio/ui:")
    assert services["worker"]["build"]["dockerfile"] == "Dockerfile"
    assert (ROOT / services["worker"]["build"]["context"] / "Dockerfile").is_file()
    for name, service in services.items():
        if "image" in service:
            tag = service["image"].rpartition(":")[2]
            assert tag and tag != "latest", f"{name}: pin the image version"


def test_published_ports(services: dict[str, Any]) -> None:
    assert published(services["temporal"]) == {7233: 7233}
    assert published(services["temporal-ui"]) == {8080: 8080}
    assert published(services["postgresql"]) == {5432: 5432}


def test_postgresql_creates_the_temporal_and_ledger_databases(services: dict[str, Any]) -> None:
    pg = services["postgresql"]
    pg_env = env(pg)
    assert pg_env["POSTGRES_DB"] == "temporal"
    mounts = [str(v) for v in pg.get("volumes", [])]
    scripts = [m.split(":")[0] for m in mounts if INIT_DIR in m]
    assert scripts, "no init script mounted into /docker-entrypoint-initdb.d"
    text = "".join((ROOT / script).read_text() for script in scripts)
    assert 'CREATE DATABASE :"ledger_db"' in text and 'OWNER :"ledger_user"' in text
    for name in ("LEDGER_DB_NAME", "LEDGER_DB_USER", "LEDGER_DB_PASSWORD"):
        assert f"${name}" in text and pg_env.get(name), name
    assert "-d" in pg["healthcheck"]["test"]
    assert flag(pg["healthcheck"]["test"], "-d") == pg_env["LEDGER_DB_NAME"]


def test_temporal_uses_the_postgresql_service(services: dict[str, Any]) -> None:
    temporal, pg_env = env(services["temporal"]), env(services["postgresql"])
    assert temporal["DB"] == "postgres12"
    assert temporal["POSTGRES_SEEDS"] == "postgresql"
    assert temporal["DB_PORT"] == "5432"
    assert temporal["POSTGRES_USER"] == pg_env["POSTGRES_USER"]
    assert temporal["POSTGRES_PWD"] == pg_env["POSTGRES_PASSWORD"]
    # auto-setup skips creating DBNAME when it equals the user: the image made it.
    assert temporal.get("DBNAME", "temporal") == pg_env["POSTGRES_DB"]
    assert temporal.get("DBNAME", "temporal") == temporal["POSTGRES_USER"]
    assert services["temporal"]["depends_on"]["postgresql"]["condition"] == "service_healthy"


def test_the_ui_talks_to_temporal(services: dict[str, Any]) -> None:
    address = env(services["temporal-ui"])["TEMPORAL_ADDRESS"]
    host, _, port = address.partition(":")
    assert host == "temporal" and int(port) in published(services["temporal"])


def test_the_worker_points_at_temporal_and_the_ledger_database(services: dict[str, Any]) -> None:
    command = worker_command(services)
    assert command[:2] == ["python", "worker.py"]

    host, _, port = flag(command, "--address").partition(":")
    assert host == "temporal"
    assert int(port) in published(services["temporal"])

    ledger = urlsplit(flag(command, "--ledger"))
    pg_env = env(services["postgresql"])
    assert ledger.scheme in ("postgresql", "postgres")
    assert ledger.hostname == "postgresql"
    assert (ledger.port or 5432) == 5432
    assert ledger.path == "/" + pg_env["LEDGER_DB_NAME"]
    assert ledger.username == pg_env["LEDGER_DB_USER"]
    assert ledger.password == pg_env["LEDGER_DB_PASSWORD"]
    # The ledger must not share Temporal's database.
    assert ledger.path != "/" + pg_env["POSTGRES_DB"]

    depends = services["worker"]["depends_on"]
    assert depends["postgresql"]["condition"] == "service_healthy"
    assert depends["temporal"]["condition"] == "service_healthy"


def test_the_worker_command_parses() -> None:
    worker = pytest.importorskip("worker")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    args = worker.parse_args(worker_command(compose["services"])[2:])
    assert args.address == "temporal:7233"
    assert args.ledger.startswith("postgresql://")
    assert not args.dev


def test_the_dockerfile_installs_the_project_and_runs_the_worker() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]
    assert lines[0] == "FROM python:3.11-slim"
    # The worker needs the PostgreSQL ledger and the HTTP tools of the examples.
    assert any(line.startswith("RUN pip install '.[postgres,http]'") for line in lines)
    assert any("worker.py" in line for line in lines if line.startswith(("CMD", "ENTRYPOINT")))
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
