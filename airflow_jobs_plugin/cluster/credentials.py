"""When the credentials of a Kubernetes connection are renewed: pure rules over an expiry and a clock.

A triggerer lives for days; the credentials it talks to the API server with often live for minutes. Three
kinds, told apart by where they come from:

1. ``EXEC``: an exec plugin (EKS ``aws eks get-token``, GKE ``gke-gcloud-auth-plugin``, AKS
   ``kubelogin``) prints a ``client.authentication.k8s.io/v1`` ExecCredential whose
   ``status.expirationTimestamp`` says when its token dies. Renewed ahead of that, by a leeway of a
   quarter of its lifetime but at most five minutes (kubernetes_asyncio 35.0.1
   ``config/kube_config.py`` ``EXPIRY_SKEW_PREVENTION_DELAY``: a fixed five minutes, which would re-run
   the plugin on every request for a token living less than that). Without an expiry it is renewed
   only when refused, as client-go does (``plugin/pkg/client/auth/exec/exec.go`` v0.36.3:
   ``credsExpired`` is false for a zero expiry).
2. ``TOKEN_FILE``: a token read from a file something else rotates: the in-cluster service-account token
   the kubelet re-projects, or a kubeconfig ``tokenFile``. Re-read every minute, ten seconds early
   (client-go v0.36.3 ``transport/token_source.go`` ``NewCachedFileTokenSource``: period one minute,
   leeway ten seconds, "half of the duration between when the kubelet refreshes a projected service
   account token and when the original token expires").
3. ``STATIC``: a client certificate or a token written in the kubeconfig. Never renewed by the clock; a
   refusal re-reads the connection once (someone may have rotated it).

After a 401 (client-go ``exec.go`` ``maybeRefreshCreds``: rotate unless already rotated), first match wins:

1. the request already retried once: give up, with an error naming the connection -- unless the
   credential it was resent with expired before the server checked it (a process starved for longer than
   a short-lived token lives): that one is renewed again, up to ``kube.MAX_SENDS`` sends in all;
2. someone renewed since the request was sent: resend with the current credential;
3. the current credential is younger than :data:`MIN_RENEW_INTERVAL` and not past its expiry: give up
   (a credential that fresh was refused; renewing again would only hammer the plugin). One past its
   expiry is renewed however young: a slow plugin can hand out a token with less than a second to live;
4. otherwise renew, then resend.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

TOKEN_FILE_PERIOD = timedelta(minutes=1)
TOKEN_FILE_LEEWAY = timedelta(seconds=10)
MAX_LEEWAY = timedelta(minutes=5)
LEEWAY_FRACTION = 0.25
MIN_RENEW_INTERVAL = timedelta(seconds=1)


class Kind(enum.Enum):
    EXEC = "exec plugin"
    TOKEN_FILE = "token file"
    STATIC = "static credentials"


@dataclass(frozen=True)
class Credential:
    """What a request authenticates with. ``header`` is the ``Authorization`` value (None for a client
    certificate); ``generation`` counts renewals, so a refused request can tell whether it was sent with
    the current credential."""

    kind: Kind
    header: str | None
    obtained_at: datetime
    expires_at: datetime | None
    generation: int = 0

    def __repr__(self) -> str:  # never print a token
        return (
            f"Credential({self.kind.name}, generation={self.generation}, obtained_at={self.obtained_at}, "
            f"expires_at={self.expires_at})"
        )


def expiry_of(kind: Kind, obtained_at: datetime, reported: datetime | None) -> datetime | None:
    """When a just-obtained credential must be treated as expired."""
    if kind is Kind.TOKEN_FILE:
        return obtained_at + TOKEN_FILE_PERIOD
    if kind is Kind.EXEC:
        return reported
    return None


def renew_at(credential: Credential) -> datetime | None:
    """The moment a credential is renewed ahead of its expiry; None if only a refusal renews it."""
    expires = credential.expires_at
    if expires is None:
        return None
    if credential.kind is Kind.TOKEN_FILE:
        return expires - TOKEN_FILE_LEEWAY
    lifetime = max(timedelta(0), expires - credential.obtained_at)
    return expires - min(MAX_LEEWAY, lifetime * LEEWAY_FRACTION)


def due(credential: Credential, now: datetime) -> bool:
    """Whether the next request should renew the credential first."""
    at = renew_at(credential)
    return at is not None and now >= at


class Verdict(enum.Enum):
    RESEND = "resend with the current credential"
    RENEW = "renew, then resend"
    GIVE_UP = "give up"


def after_unauthorized(used: Credential, current: Credential, *, retried: bool, now: datetime) -> Verdict:
    """What a request refused with 401 does next (the module docstring's list)."""
    if retried:
        # A renewed credential that expired before the server checked it (a starved process, a token
        # minted for seconds) was not refused for what it is: renew once more. One minted already
        # expired was never valid and gives up.
        in_flight = (
            used.expires_at is not None
            and used.obtained_at < used.expires_at <= now
            and used.generation == current.generation
        )
        return Verdict.RENEW if in_flight else Verdict.GIVE_UP
    if used.generation != current.generation:
        return Verdict.RESEND
    expired = current.expires_at is not None and now >= current.expires_at
    if now - current.obtained_at < MIN_RENEW_INTERVAL and not expired:
        return Verdict.GIVE_UP
    return Verdict.RENEW


def refused_message(name: str, credential: Credential, server_message: str) -> str:
    """The error a task or the watch log shows when the API server keeps refusing a connection
    (``name``: "connection 'kubernetes_default'", or the kubeconfig a client was built from)."""
    expiry = f"valid until {credential.expires_at.isoformat()}" if credential.expires_at else "with no expiry"
    remedy = {
        Kind.EXEC: "check that the exec plugin the kubeconfig names still returns a token the cluster "
        "accepts (its cloud identity and the cluster's access entries / role bindings)",
        Kind.TOKEN_FILE: "check the service account and its token file (projected volume) of this pod",
        Kind.STATIC: "the certificate or token in the connection's kubeconfig is no longer accepted: "
        "update the connection",
    }[credential.kind]
    return (
        f"the Kubernetes API server refused freshly obtained credentials of {name} "
        f"({credential.kind.value}, obtained at {credential.obtained_at.isoformat()}, {expiry}): "
        f"{server_message or 'Unauthorized'}; {remedy}"
    )
