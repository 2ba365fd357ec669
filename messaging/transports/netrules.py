"""Where a webhook may point, and what its secret may be.

A URL is ``http`` or ``https``, has no user or password part, no whitespace
or control characters, and its host is inside ``COURIER_WEBHOOK_ALLOW`` and
is not one of Courier's own addresses (API, store, broker, Flower). A secret
is ``whsec_`` + base64 of 24-64 bytes, or 24-64 other printable characters.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import secrets
import socket
from urllib.parse import urlsplit

from standardwebhooks import Webhook

from messaging.config import Settings, is_sentinel, sentinel_parts

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
SECRET_MIN, SECRET_MAX = 24, 64
DEFAULT_PORTS = {"http": 80, "https": 443}
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def new_secret() -> str:
    """A fresh ``whsec_`` secret."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signer(secret: str) -> Webhook:
    """A Standard Webhooks signer: ``whsec_`` secrets are base64, others raw UTF-8."""
    if secret.startswith(SECRET_PREFIX):
        return Webhook(secret)
    return Webhook(secret.encode())


def check_secret(secret: str) -> None:
    """Raises ValueError unless the secret is usable (see the module docstring)."""
    if secret.startswith(SECRET_PREFIX):
        try:
            raw = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("whsec_ must be followed by base64") from None
        if not SECRET_MIN <= len(raw) <= SECRET_MAX:
            raise ValueError(f"whsec_ secrets carry {SECRET_MIN}-{SECRET_MAX} bytes")
        return
    if not SECRET_MIN <= len(secret) <= SECRET_MAX or not secret.isprintable():
        raise ValueError(f"must be whsec_ + base64, or {SECRET_MIN}-{SECRET_MAX} "
                         "printable characters")


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _allowed(host: str, address: Address | None, settings: Settings) -> bool:
    for allowed in settings.webhook_networks:
        if isinstance(allowed, str):
            if host == allowed:
                return True
        elif address is not None and address.version == allowed.version and address in allowed:
            return True
    return False


def own_endpoints(settings: Settings) -> list[tuple[str, int]]:
    """Courier's own (host, port) pairs: API, store, broker, Flower."""
    out = [(settings.host.lower(), settings.port),
           (settings.flower_host.lower(), settings.flower_port)]
    # kombu's URL for Sentinels names each of them, ';' between.
    for url in (settings.store_url, *settings.celery_broker_url.split(";")):
        if is_sentinel(url):
            out += [(host.lower(), port) for host, port in sentinel_parts(url)[0]]
            continue
        parts = urlsplit(url)
        if parts.hostname and parts.port:
            out.append((parts.hostname.lower(), parts.port))
    return out


def _loopback(host: str, address: Address | None) -> bool:
    return host == "localhost" or (address is not None and address.is_loopback)


def is_own(host: str, address: Address | None, port: int, settings: Settings) -> bool:
    """True when (host or its address, port) is one of Courier's own endpoints."""
    for own_host, own_port in own_endpoints(settings):
        if port != own_port:
            continue
        own_address = _address(own_host)
        if (own_host in WILDCARD_HOSTS or own_host == host
                or (address is not None and address == own_address)
                or (_loopback(own_host, own_address) and _loopback(host, address))):
            return True
    return False


def _target(url: str) -> tuple[str, int]:
    """The (host, port) of a URL that passes the shape rules; ValueError otherwise."""
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ValueError("must not contain whitespace or control characters")
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError("must be an http or https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry a user or password")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise ValueError("has an invalid port") from None
    return parts.hostname.lower(), port


def check_url(url: str, settings: Settings) -> None:
    """Raises ValueError unless the URL may be used (see the module docstring)."""
    host, port = _target(url)
    address = _address(host)
    if not _allowed(host, address, settings):
        raise ValueError(f"host {host} is outside COURIER_WEBHOOK_ALLOW")
    if is_own(host, address, port, settings):
        raise ValueError(f"{host}:{port} is one of Courier's own addresses")


def check_resolved(url: str, settings: Settings) -> list[Address]:
    """At dispatch: every address the host resolves to must be allowed and not Courier's own.

    Returns those addresses, for the request to connect to (resolving the name
    again could give another answer than the one checked).

    Raises:
        ValueError: the URL may not be used today.
        socket.gaierror: the host does not resolve (nothing was sent).
    """
    check_url(url, settings)
    host, port = _target(url)
    by_name = host in settings.webhook_networks
    checked: list[Address] = []
    for info in socket.getaddrinfo(host.strip("[]"), port, proto=socket.IPPROTO_TCP):
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not by_name and not _allowed(str(address), address, settings):
            raise ValueError(f"host {host} resolves to {address}, outside COURIER_WEBHOOK_ALLOW")
        if is_own(str(address), address, port, settings):
            raise ValueError(f"host {host} resolves to Courier's own address {address}:{port}")
        if address not in checked:
            checked.append(address)
    return checked


def pinned(url: str, address: Address) -> tuple[str, str]:
    """The URL with its host replaced by ``address``, and the Host header it keeps."""
    parts = urlsplit(url)
    host = f"[{address}]" if address.version == 6 else str(address)
    port = f":{parts.port}" if parts.port else ""
    return parts._replace(netloc=host + port).geturl(), parts.netloc
