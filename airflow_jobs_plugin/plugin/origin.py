"""Whether a state-changing request comes from this Airflow's own pages (a cross-site request forgery guard).

Airflow's UI authenticates the browser with a session cookie (``_token``). A browser attaches that
cookie to a form another site posts to us whenever the cookie's SameSite rule lets it (always for a
same-site origin such as another port or subdomain of the same host), so a cookie alone does not prove
that the user meant to cancel, stop or resume a job. Browsers send ``Origin`` on every POST (and
``Referer`` unless told not to), and a page cannot forge either, so a POST authenticated by the cookie
is accepted only when its ``Origin`` (or, without one, its ``Referer``) is this Airflow's own origin.
A request carrying ``Authorization: Bearer <token>`` is not checked: a browser never adds that header
by itself, so whoever sent it holds the token, and Airflow then authenticates the token, not the
cookie. Any other ``Authorization`` (``Basic ...``, a bare word) is checked like no header at all:
Airflow honours only Bearer and falls back to the cookie (``get_user`` in
``airflow/api_fastapi/core_api/security.py``, apache-airflow-core 3.3.2), so such a header proves
nothing about who sent the request.

This Airflow's own origin is the one ``[api] base_url`` names, where it names one: a request's ``Host``
is the client's to write (a name of the attacker's resolving to this server carries its own ``Host`` and
``Origin`` alike), while ``base_url`` is the address the admin gave. Only where ``base_url`` is unset (or
a bare path, which names no host) is the request's ``Host`` the origin, with a proxy's
``X-Forwarded-Host`` one more where Airflow is configured to trust proxies (the API server started with
``--proxy-headers``, ``ARG_API_SERVER_ALLOW_PROXY_FORWARDING`` in ``airflow/cli/cli_config.py``, 3.3.2):
elsewhere any client may send it, and an origin it names proves nothing.

``base_url`` is read as Airflow reads it (apache-airflow-core 3.3.2): its scheme and host are the
origin, its path is where Airflow is served (``API_ROOT_PATH`` in ``airflow/api_fastapi/app.py``), and a
URL belongs to this Airflow when its path is that path or under it (``is_safe_url`` in
``airflow/api_fastapi/core_api/security.py``, paths normalized). An ``Origin`` carries no path, so the
path is checked on a ``Referer`` only: another application served at the same host under another path
does not pass for this Airflow's pages.

Pure: the shell (:mod:`airflow_jobs_plugin.plugin.app`) gathers the headers and the server's flags.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# The API server's flag that makes uvicorn trust X-Forwarded-* (airflow/cli/cli_config.py, 3.3.2).
PROXY_HEADERS_FLAG = "--proxy-headers"


def carries_bearer(authorization: str | None) -> bool:
    """Whether ``Authorization`` is a Bearer token, the one scheme Airflow authenticates (FastAPI's
    ``HTTPBearer``: the scheme case-insensitive, a non-empty token after it)."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())


def trusts_proxies(argv: Sequence[str]) -> bool:
    """Whether the API server was started trusting proxy headers (its command line, which uvicorn's and
    gunicorn's worker processes inherit)."""
    return PROXY_HEADERS_FLAG in argv


@dataclass(frozen=True)
class OwnSite:
    """Where this Airflow is reached: its origins (``scheme://host[:port]``), the path its pages are
    served under, and whether ``[api] base_url`` said so (else the request's ``Host`` did)."""

    origins: tuple[str, ...]
    path: str = "/"
    from_base_url: bool = False

    def describe(self) -> str:
        named = ", ".join(self.origins) or "unknown"
        return f"{named}, its [api] base_url" if self.from_base_url else named


def base_path(base_url: str | None) -> str:
    """The path Airflow is served under, from ``[api] base_url`` (``/`` when it has none), normalized."""
    if not base_url:
        return "/"
    try:
        path = urlsplit(base_url.strip()).path
    except ValueError:
        return "/"
    normalized = posixpath.normpath(path) if path else "/"
    return "/" if normalized in (".", "//") else normalized


def own_site(
    scheme: str,
    host: str,
    *,
    forwarded_host: str | None,
    forwarded_proto: str | None,
    base_url: str | None,
    trust_proxies: bool,
) -> OwnSite:
    """Where this Airflow is reached: ``base_url``'s origin where it names one; else the request's host
    and, behind a trusted proxy, the host the proxy forwarded (its first hop)."""
    path = base_path(base_url)
    configured = origin_of(base_url)
    if configured is not None:
        return OwnSite((configured,), path, from_base_url=True)
    found = [origin_of(f"{scheme}://{host}")]
    if trust_proxies and forwarded_host:
        proto = (forwarded_proto or scheme).split(",")[0].strip() or scheme
        found.append(origin_of(f"{proto}://{forwarded_host.split(',')[0].strip()}"))
    return OwnSite(tuple(dict.fromkeys(o for o in found if o)), path)


def _under(path: str, base: str) -> bool:
    """Whether URL ``path`` is ``base`` or below it, both normalized (Airflow's ``is_safe_url``)."""
    if base == "/":
        return True
    target = posixpath.normpath(path or "/")
    return target == base or target.startswith(base.rstrip("/") + "/")


def origin_of(url: str | None) -> str | None:
    """``scheme://host[:port]`` of a URL, lower-cased, default port dropped; ``None`` if it has none."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    return f"{scheme}://{host}" if port in (None, _DEFAULT_PORTS[scheme]) else f"{scheme}://{host}:{port}"


def refusal(origin: str | None, referer: str | None, site: OwnSite) -> str | None:
    """Why a cookie-authenticated POST is refused, or ``None`` when it comes from this Airflow's ``site``.

    ``Origin: null`` (an opaque origin: a sandboxed frame without ``allow-same-origin``, a ``data:``
    URL, a redirect across sites) is refused; so is a request with neither header, which no browser
    form or script sends. A ``Referer`` (read only without an ``Origin``) must also lie under the path
    Airflow is served at.
    """
    own = set(site.origins)
    if origin is not None and origin.strip():
        if origin.strip() == "null":
            return "cross-origin request refused: the page that sent it has no origin (Origin: null)"
        claimed = origin_of(origin)
        source = "Origin"
    elif referer:
        claimed = origin_of(referer)
        source = "Referer"
    else:
        return (
            "cross-origin request refused: no Origin or Referer header; send the request from the "
            "GPU Jobs page, or authenticate with Authorization: Bearer <token>"
        )
    if claimed not in own:
        return f"cross-origin request refused: {source} {claimed or origin or referer} is not this Airflow ({site.describe()})"
    if source == "Referer" and not _under(_path_of(referer), site.path):
        return (
            f"cross-origin request refused: Referer {referer} is not a page of this Airflow, which is served "
            f"under {site.path} ([api] base_url)"
        )
    return None


def _path_of(url: str | None) -> str:
    try:
        return urlsplit((url or "").strip()).path or "/"
    except ValueError:
        return "/"
