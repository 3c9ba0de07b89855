"""TLS settings: what the variables turn on, and the files refused before any byte is sent."""

from __future__ import annotations

import ssl

import pytest

from asyncoll._runtime.settings import Settings
from asyncoll._tls import context as tls_context
from asyncoll._tls.context import TlsSettings, load
from asyncoll._tls.handshake import looks_like_tls, refusal
from asyncoll.errors import AuthenticationError, ConfigurationError
from integration import certificates

pytestmark = [pytest.mark.timeout(60), certificates.NEEDS_OPENSSL]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certificates.make(tmp_path_factory.mktemp("certificates"))


def test_no_variable_leaves_tls_off():
    assert TlsSettings.from_environment({}) is None
    assert Settings.from_environment({}).tls is None
    assert Settings.from_environment({}).transport.tls is None


def test_with_a_ca_both_sides_check_the_others_certificate(certs):
    tls = Settings.from_environment(certs.environment()).tls

    assert tls is not None and tls.mutual and tls.server is not None
    assert tls.server.verify_mode == ssl.CERT_REQUIRED
    assert tls.client.verify_mode == ssl.CERT_REQUIRED
    # Peers are dialled by address: the CA decides, not host names.
    assert not tls.client.check_hostname
    assert Settings.from_environment(certs.environment()).transport.tls is not None


def test_without_a_ca_traffic_is_encrypted_and_a_warning_says_nothing_is_checked(certs,
                                                                                 caplog):
    tls = load(TlsSettings(str(certs.cert), str(certs.key)))

    assert not tls.mutual and tls.client.verify_mode == ssl.CERT_NONE
    assert "no peer's certificate is checked" in caplog.text


def test_a_client_only_needs_the_ca(certs):
    tls = load(TlsSettings(ca=str(certs.ca)), listens=False)
    assert tls.server is None and tls.mutual


@pytest.mark.parametrize("variables, message", [
    ({"ASYNCOLL_TLS_CERT": "cert"}, "ASYNCOLL_TLS_CERT is set but ASYNCOLL_TLS_KEY is not"),
    ({"ASYNCOLL_TLS_KEY": "key"}, "ASYNCOLL_TLS_KEY is set but ASYNCOLL_TLS_CERT is not"),
    ({"ASYNCOLL_TLS_CA": "ca"}, "each needs a certificate and key of its own"),
])
def test_incomplete_variables_are_refused_naming_what_is_missing(variables, message):
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_environment(variables)


def test_a_missing_file_is_refused_naming_the_variable_and_the_path(certs, tmp_path):
    missing = tmp_path / "nowhere.pem"
    environ = dict(certs.environment(), ASYNCOLL_TLS_CA=str(missing))

    with pytest.raises(ConfigurationError, match=f"cannot read ASYNCOLL_TLS_CA={missing}: "
                                                 "No such file"):
        Settings.from_environment(environ)


def test_a_key_that_is_not_the_certificates_is_refused(certs):
    environ = dict(certs.environment(), ASYNCOLL_TLS_KEY=str(certs.stranger_key))

    with pytest.raises(ConfigurationError, match="KEY_VALUES_MISMATCH.*the key the "
                                                 "certificate's own"):
        Settings.from_environment(environ)


def test_a_ca_file_that_is_not_pem_is_refused(certs, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")

    with pytest.raises(ConfigurationError, match=f"cannot use ASYNCOLL_TLS_CA={junk}"):
        Settings.from_environment(dict(certs.environment(), ASYNCOLL_TLS_CA=str(junk)))


def test_the_first_bytes_of_a_tls_hello_are_told_from_asyncolls_own():
    assert looks_like_tls(b"\x16\x03\x01\x02\x00")
    assert not looks_like_tls(b"AC\x05")
    assert not looks_like_tls(b"\x00\x00\x00\x10")


@pytest.mark.parametrize("reason, words", [
    ("WRONG_VERSION_NUMBER", "does not speak TLS"),
    ("CERTIFICATE_VERIFY_FAILED", "showed a certificate that the CA in ASYNCOLL_TLS_CA did "
                                  "not sign"),
    ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "showed no certificate"),
    ("TLSV1_ALERT_UNKNOWN_CA", "refused this process's certificate"),
])
def test_a_failed_handshake_is_worded_by_its_reason(reason, words):
    failure = ssl.SSLError(1, f"[SSL: {reason}] something")
    failure.reason = reason  # type: ignore[misc]

    error = refusal(failure, "the coordinator at 10.0.0.1:29500", mutual=True)

    assert isinstance(error, AuthenticationError)
    assert str(error).startswith("the coordinator at 10.0.0.1:29500 ")
    assert words in str(error)
    assert error.__cause__ is failure


def test_every_refusal_says_what_to_set():
    assert "ASYNCOLL_TLS_CA" in tls_context.SAME_EVERYWHERE
    assert "or on none" in tls_context.SAME_EVERYWHERE
