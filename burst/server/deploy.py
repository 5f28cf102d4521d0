"""``burst server deploy``: the server as a group runs it, as files to install. A systemd unit for a
site's login node, a container image definition, and Kubernetes manifests (a Deployment, its
Service, a claim for the members' state, and the database URL in a Secret), each rendered from the
same ``burst server start`` command line."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import yaml

from ..errors import BurstError
from ..home.state import check_name
from .serve import DEFAULT_PORT

CONTAINER_DATA = "/var/lib/burst"
TLS_MOUNT = "/etc/burst/tls"


def start_args(data: str, host: str, port: int, cert: Optional[str] = None, key: Optional[str] = None,
               insecure_http: bool = False) -> list[str]:
    """The words after ``burst`` that start the server (the database comes from ``BURST_SERVER_DB``)."""
    args = ["server", "start", "--data", data, "--host", host, "--port", str(port)]
    if cert and key:
        args += ["--cert", cert, "--key", key]
    elif insecure_http:
        args.append("--insecure-http")
    return args


def systemd_unit(user: str, data: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT, cert: Optional[Path] = None,
                 key: Optional[Path] = None, env_file: Path = Path("/etc/burst/server.env"), python: Optional[str] = None) -> str:
    """A unit for a login node: the server as ``user``, restarted when it fails, its database URL in
    ``env_file`` (``BURST_SERVER_DB=postgresql+psycopg://...``, readable by root and that user only)."""
    from .serve import is_loopback

    if not is_loopback(host) and not (cert and key):
        raise BurstError(f"--host {host} listens beyond the login node: give --cert and --key, as `burst server start` needs them")
    command = [python or sys.executable, "-m", "burst.cli", *start_args(str(data), host, port, str(cert) if cert else None,
                                                                       str(key) if key else None)]
    return "\n".join([
        "[Unit]",
        "Description=burst server: a research group's clusters, runs and budgets",
        "Wants=network-online.target",
        "After=network-online.target postgresql.service",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        # no "-": a missing file stops the start (systemd.exec(5): a "-" prefix ignores a file that does not exist),
        # where the server would otherwise open an empty SQLite database and guard none of the group's clusters
        f"EnvironmentFile={env_file}",
        f"ExecStart={shlex.join(command)}",
        "Restart=on-failure",
        # systemd's default (control-group) would stop, with the server, every process it started: the
        # members' managed-run controllers, watchers and local Ray clusters; they outlive the server by
        # design and a server that starts again revives the controllers (systemd.kill(5), KillMode=)
        "KillMode=process",
        "RestartSec=5",
        "NoNewPrivileges=true",
        "UMask=0077",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def containerfile(python_version: str = "3.11") -> str:
    """An image with burst and its server from the wheel built next to it (``pip wheel --no-deps -w dist .``)."""
    return "\n".join([
        f"FROM python:{python_version}-slim",
        "# burst and the server's extras, from the wheel built beside this file: pip wheel --no-deps -w dist .",
        "COPY dist/ /tmp/dist/",
        "RUN pip install --no-cache-dir \"$(ls /tmp/dist/burst-*.whl)[server,all]\" && rm -rf /tmp/dist",
        f"RUN useradd --uid 10001 --create-home burst && mkdir -p {CONTAINER_DATA} && chown burst {CONTAINER_DATA}",
        "USER 10001",
        f"VOLUME {CONTAINER_DATA}",
        f"EXPOSE {DEFAULT_PORT}",
        "# plain HTTP on the container's network, said in so many words: put TLS in front of it, or run it with",
        "# server start ... --cert FILE --key FILE (what `burst server deploy kubernetes --tls-secret` does)",
        "ENTRYPOINT [\"burst\"]",
        "CMD " + json.dumps(start_args(CONTAINER_DATA, "0.0.0.0", DEFAULT_PORT, insecure_http=True)),
        "",
    ])


def kubernetes(namespace: str, image: str, db_url: Optional[str] = None, storage_gi: int = 20, tls_secret: Optional[str] = None,
               replicas: int = 1) -> list[dict]:
    """The manifests: a claim for the members' state, the database URL as a Secret (only when given:
    else SQLite on the claim, for one replica), a Deployment and its Service. Without a TLS Secret
    the server speaks plain HTTP inside the cluster (TLS at the ingress), and says so in its args."""
    check_name(namespace, "namespace")
    if replicas > 1 and db_url is None:
        raise BurstError("--replicas above 1 needs --db (PostgreSQL): SQLite on one claim serves one server")
    if not 1 <= storage_gi <= 10_000:
        raise BurstError(f"--storage-gi {storage_gi}: give 1 to 10000")
    labels = {"app.kubernetes.io/name": "burst-server", "app.kubernetes.io/part-of": "burst"}
    meta = lambda name: {"name": name, "namespace": namespace, "labels": labels}  # noqa: E731
    args = start_args(CONTAINER_DATA, "0.0.0.0", DEFAULT_PORT, f"{TLS_MOUNT}/tls.crt" if tls_secret else None,
                      f"{TLS_MOUNT}/tls.key" if tls_secret else None, insecure_http=not tls_secret)
    env = [{"name": "BURST_SERVER_DB", "valueFrom": {"secretKeyRef": {"name": "burst-server-db", "key": "url"}}}] if db_url else []
    mounts = [{"name": "state", "mountPath": CONTAINER_DATA}]
    volumes = [{"name": "state", "persistentVolumeClaim": {"claimName": "burst-server-state"}}]
    if tls_secret:
        mounts.append({"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": tls_secret, "defaultMode": 0o400}})
    docs: list[dict] = [{
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("burst-server-state"),
        "spec": {"accessModes": ["ReadWriteOnce" if replicas == 1 else "ReadWriteMany"],
                 "resources": {"requests": {"storage": f"{storage_gi}Gi"}}},
    }]
    if db_url:
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta("burst-server-db"), "type": "Opaque",
                     "stringData": {"url": db_url}})
    probe = {"tcpSocket": {"port": DEFAULT_PORT}, "periodSeconds": 10}
    docs.append({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("burst-server"),
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "strategy": {"type": "Recreate"} if replicas == 1 else {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
                     "containers": [{"name": "server", "image": image, "command": ["burst"], "args": args, "env": env,
                                     "ports": [{"name": "http", "containerPort": DEFAULT_PORT}],
                                     "readinessProbe": probe, "livenessProbe": {**probe, "initialDelaySeconds": 20},
                                     "volumeMounts": mounts,
                                     "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": False}}],
                     "volumes": volumes}}},
    })
    docs.append({"apiVersion": "v1", "kind": "Service", "metadata": meta("burst-server"),
                 "spec": {"selector": labels, "ports": [{"name": "http", "port": DEFAULT_PORT, "targetPort": "http"}]}})
    return docs


def as_yaml(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
