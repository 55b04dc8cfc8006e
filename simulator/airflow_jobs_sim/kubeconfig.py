"""Kubeconfig files pointing at the simulated API server (plain HTTP, optional bearer token, or an exec
plugin minting expiring tokens when the server demands them)."""

from __future__ import annotations

import json
import os
import tempfile


def kubeconfig_text(
    server: str,
    token: str | None = None,
    name: str = "sim",
    namespace: str = "default",
    token_ttl: float | None = None,
) -> str:
    """A kubeconfig document for ``server``; JSON is valid YAML, so every loader reads it."""
    from airflow_jobs_sim.auth import exec_user

    user: dict = {"token": token} if token else {}
    if token and token_ttl is not None:
        user = exec_user(token_ttl, secret=token)
    return user_kubeconfig_text(server, user, name, namespace)


def user_kubeconfig_text(server: str, user: dict, name: str = "sim", namespace: str = "default") -> str:
    """A kubeconfig document for ``server`` authenticating as ``user`` (a kubeconfig ``user`` entry)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }
    return json.dumps(doc, indent=2) + "\n"


def write_kubeconfig(
    path: str | None, server: str, token: str | None = None, name: str = "sim", token_ttl: float | None = None
) -> str:
    """Write a kubeconfig (to a new private temp file when ``path`` is None); returns its path."""
    return _write(path, kubeconfig_text(server, token, name, token_ttl=token_ttl))


def write_user_kubeconfig(path: str | None, server: str, user: dict, name: str = "sim") -> str:
    """Write a kubeconfig whose user entry is ``user`` (an exec plugin, a token file, ...)."""
    return _write(path, user_kubeconfig_text(server, user, name))


def _write(path: str | None, text: str) -> str:
    if path is None:
        fd, path = tempfile.mkstemp(prefix="sim-kubeconfig-", suffix=".yaml")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return path
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Write then rename so a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kubeconfig-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
