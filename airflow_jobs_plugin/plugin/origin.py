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

This Airflow's own origins are the request's ``Host`` and ``[api] base_url``. A proxy's
``X-Forwarded-Host`` is one more only where Airflow is configured to trust proxies (the API server
started with ``--proxy-headers``, ``ARG_API_SERVER_ALLOW_PROXY_FORWARDING`` in ``airflow/cli/cli_config.py``,
3.3.2): elsewhere any client may send it, and an origin it names proves nothing.

Pure: the shell (:mod:`airflow_jobs_plugin.plugin.app`) gathers the headers and the server's flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def own_origins(
    scheme: str,
    host: str,
    *,
    forwarded_host: str | None,
    forwarded_proto: str | None,
    base_url: str | None,
    trust_proxies: bool,
) -> list[str]:
    """The origins this Airflow is reached at: as the request names its host, as a trusted proxy
    forwarded it (its first hop), and ``base_url`` when set."""
    found = [f"{scheme}://{host}"]
    if trust_proxies and forwarded_host:
        proto = (forwarded_proto or scheme).split(",")[0].strip() or scheme
        found.append(f"{proto}://{forwarded_host.split(',')[0].strip()}")
    if base_url:
        found.append(base_url)
    return found


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


def refusal(origin: str | None, referer: str | None, own_origins: Iterable[str]) -> str | None:
    """Why a cookie-authenticated POST is refused, or ``None`` when it comes from one of ``own_origins``.

    ``Origin: null`` (an opaque origin: a sandboxed frame without ``allow-same-origin``, a ``data:``
    URL, a redirect across sites) is refused; so is a request with neither header, which no browser
    form or script sends.
    """
    own = {o for o in (origin_of(u) for u in own_origins) if o}
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
    if claimed in own:
        return None
    return f"cross-origin request refused: {source} {claimed or origin or referer} is not this Airflow ({', '.join(sorted(own)) or 'unknown'})"
