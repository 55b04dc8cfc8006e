"""Bearer-token authentication for the simulated API server, with tokens that expire (off by default).

Two modes, chosen by :class:`~.config.ClusterConfig`:

- ``token`` alone: one static bearer token, compared as is (a kubeconfig ``token:``).
- ``token`` and ``token_ttl``: ``token`` is a signing secret and the server accepts only tokens minted
  with it (``python -m airflow_jobs_sim.mint_token``, an exec credential plugin) that have not
  expired. This is what EKS (``aws eks get-token``: a presigned STS request valid 15 minutes), GKE and
  AKS do with short-lived tokens; a refused request gets the API server's 401 Status
  (``reason: Unauthorized``), as kube-apiserver's ``staging/src/k8s.io/apiserver/pkg/endpoints/filters/
  authentication.go`` answers every failed authentication.

A minted token is ``ajp-sim.<expiry in unix seconds>.<HMAC-SHA256 of the expiry>``; the server also
refuses one that claims to live longer than ``token_ttl`` (a proxy enforcing a maximum token age).
"""

from __future__ import annotations

import hashlib
import hmac
import sys
from datetime import datetime, timezone

from airflow_jobs_sim.config import ClusterConfig

PREFIX = "ajp-sim"
EXEC_API_VERSION = "client.authentication.k8s.io/v1"
SECRET_ENV = "AJP_SIM_TOKEN_SECRET"
CLOCK_SLACK = 1.0  # seconds a token may claim beyond token_ttl (minting and checking clocks differ)


def _signature(secret: str, expires: int) -> str:
    return hmac.new(secret.encode(), str(expires).encode(), hashlib.sha256).hexdigest()[:32]


def mint(secret: str, ttl: float, now: float) -> tuple[str, int]:
    """A token signed with ``secret`` and its expiry (unix seconds, whole: ExecCredential's
    ``expirationTimestamp`` is an RFC 3339 time to the second)."""
    if ttl <= 0:
        raise ValueError(f"token ttl must be positive, got {ttl}")
    expires = int(now + ttl)
    return f"{PREFIX}.{expires}.{_signature(secret, expires)}", expires


def accepts(config: ClusterConfig, authorization: str, now: float) -> bool:
    """Whether a request's ``Authorization`` header authenticates it (only called when ``config.token``
    is set)."""
    secret = config.token or ""
    if config.token_ttl is None:
        return hmac.compare_digest(authorization, f"Bearer {secret}")
    scheme, _, token = authorization.partition(" ")
    parts = token.split(".")
    if scheme != "Bearer" or len(parts) != 3 or parts[0] != PREFIX or not parts[1].isdigit():
        return False
    expires = int(parts[1])
    if not hmac.compare_digest(parts[2], _signature(secret, expires)):
        return False
    return now < expires <= now + config.token_ttl + CLOCK_SLACK


# The identity behind the admin token (and every token minted with it): kube-apiserver lets the
# system:masters group do anything before asking an authorizer.
ADMIN = ("kubernetes-admin", ("system:masters", "system:authenticated"))


def identity_of(config: ClusterConfig, authorization: str) -> tuple[str, tuple[str, ...]] | None:
    """The configured identity whose token the ``Authorization`` header carries, or None."""
    for identity in config.identities:
        if hmac.compare_digest(authorization, f"Bearer {identity.token}"):
            return identity.user, identity.groups
    return None


def authenticate(config: ClusterConfig, authorization: str, now: float) -> tuple[str, tuple[str, ...]] | None:
    """The user (name, groups) a request's ``Authorization`` header authenticates, or None (a 401):
    one of ``config.identities`` by its token, else the admin token or a token minted with it."""
    found = identity_of(config, authorization)
    if found is not None:
        return found
    return ADMIN if accepts(config, authorization, now) else None


def exec_credential(token: str, expires: int) -> dict:
    """The ``ExecCredential`` an exec plugin prints (k8s.io/client-go/pkg/apis/clientauthentication/v1)."""
    stamp = datetime.fromtimestamp(expires, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": EXEC_API_VERSION,
        "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": stamp},
    }


def exec_user(ttl: float, *, secret: str | None = None, secret_file: str | None = None) -> dict:
    """A kubeconfig ``user`` whose exec plugin mints tokens living ``ttl`` seconds, signed with
    ``secret`` (carried in the plugin's environment) or with the contents of ``secret_file`` (read at
    every run, so a test can revoke the identity by changing the file)."""
    args = ["-m", "airflow_jobs_sim.mint_token", "--ttl", repr(float(ttl))]
    env = []
    if secret_file is not None:
        args += ["--secret-file", secret_file]
    elif secret is not None:
        env.append({"name": SECRET_ENV, "value": secret})
    else:
        raise ValueError("exec_user needs secret or secret_file")
    return {
        "exec": {
            "apiVersion": EXEC_API_VERSION,
            "command": sys.executable,
            "args": args,
            "env": env,
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }
