"""TLS settings and the ``ssl`` contexts built from them.

Three variables (and the coordinator's --tls-cert, --tls-key, --tls-ca) turn
TLS on: ASYNCOLL_TLS_CERT and ASYNCOLL_TLS_KEY, this process's certificate
chain and private key (PEM), and ASYNCOLL_TLS_CA, the certificate authority
that signed every member's certificate. Every process of a job sets them,
or none does.

With a CA it is mutual TLS: each side of every connection shows its
certificate and checks the other's against the CA. Without one, traffic is
encrypted but neither side checks who is at the other end (a weaker mode:
it stops eavesdroppers, not an impostor), and a warning says so.

Host names are not checked: peers dial the addresses the coordinator hands
out (IP addresses, often of pods or containers that come and go), which no
certificate names. The CA is the trust boundary instead, as in the mutual
TLS of gloo and of service meshes inside one cluster: any certificate it
signed is a member. Issue the job's certificates from a CA of its own.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from asyncoll.errors import ConfigurationError

log = logging.getLogger("asyncoll")

#: The variables, by role.
CERT_VARIABLE = "ASYNCOLL_TLS_CERT"
KEY_VARIABLE = "ASYNCOLL_TLS_KEY"
CA_VARIABLE = "ASYNCOLL_TLS_CA"

#: What to do, said at the end of a refusal caused by settings that differ.
SAME_EVERYWHERE = (f"set {CERT_VARIABLE}, {KEY_VARIABLE} and {CA_VARIABLE} on every process "
                   "of the job (and --tls-cert, --tls-key, --tls-ca on asyncoll-coordinator), "
                   "or on none")


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Where this process's certificate, key and CA are (paths; "" for none)."""

    cert: str = ""
    key: str = ""
    ca: str = ""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> TlsSettings | None:
        """The TLS variables of ``environ``, or None when none is set (TLS off)."""
        found = cls(environ.get(CERT_VARIABLE, ""), environ.get(KEY_VARIABLE, ""),
                    environ.get(CA_VARIABLE, ""))
        return found if found != cls() else None


@dataclass(frozen=True, slots=True)
class Tls:
    """The contexts of one process: to accept connections, and to make them.

    Build it with :func:`load`; ``client`` alone (no ``server``) is a process
    that only connects (``asyncoll status`` with just a CA).
    """

    settings: TlsSettings
    client: ssl.SSLContext = field(compare=False)
    server: ssl.SSLContext | None = field(default=None, compare=False)

    @property
    def mutual(self) -> bool:
        """Whether each side checks the other's certificate (a CA is set)."""
        return bool(self.settings.ca)


def load(settings: TlsSettings, *, listens: bool = True) -> Tls:
    """Read the certificate, key and CA of ``settings`` into contexts, before any byte is sent.

    Args:
        settings: the files.
        listens: whether this process accepts connections (every member of a
            job and the coordinator do), so needs a certificate of its own.

    Raises:
        ConfigurationError: a file is missing, unreadable, not PEM, or the key
            does not match the certificate; or the settings are incomplete.
    """
    if bool(settings.cert) != bool(settings.key):
        given, missing = ((CERT_VARIABLE, KEY_VARIABLE) if settings.cert
                          else (KEY_VARIABLE, CERT_VARIABLE))
        raise ConfigurationError(f"{given} is set but {missing} is not: TLS needs both the "
                                 "certificate and its private key")
    if not settings.cert and listens:
        raise ConfigurationError(f"{CA_VARIABLE} is set without {CERT_VARIABLE} and "
                                 f"{KEY_VARIABLE}: every process of a job accepts "
                                 "connections from its peers, so each needs a certificate "
                                 "and key of its own (signed by that CA)")
    for path, name in ((settings.cert, CERT_VARIABLE), (settings.key, KEY_VARIABLE),
                       (settings.ca, CA_VARIABLE)):
        if path:
            _check_readable(path, name)
    client = _context(ssl.PROTOCOL_TLS_CLIENT, settings)
    server = _context(ssl.PROTOCOL_TLS_SERVER, settings) if settings.cert else None
    if not settings.ca and listens:
        log.warning("TLS without %s: connections are encrypted but no peer's certificate "
                    "is checked, so an impostor on the network is not kept out. Set %s to "
                    "the CA that signed the job's certificates for mutual TLS",
                    CA_VARIABLE, CA_VARIABLE)
    return Tls(settings, client, server)


def _check_readable(path: str, name: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name}={path}: {exc.strerror or exc}; point "
                                 f"{name} at a PEM file this process can read") from exc


def _context(protocol: int, settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # Peers are dialled by address, which no certificate names: the CA decides
    # (see the module's docstring).
    context.check_hostname = False
    if settings.cert:
        try:
            context.load_cert_chain(settings.cert, settings.key)
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"cannot use {CERT_VARIABLE}={settings.cert} with {KEY_VARIABLE}="
                f"{settings.key}: {exc.reason or exc}; both must be PEM files, the key "
                "the certificate's own (unencrypted)") from exc
    if settings.ca:
        try:
            context.load_verify_locations(cafile=settings.ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigurationError(f"cannot use {CA_VARIABLE}={settings.ca}: "
                                     f"{getattr(exc, 'reason', None) or exc}; it must hold "
                                     "the CA's certificate in PEM") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    return context
