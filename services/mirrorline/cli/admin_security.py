"""The admin CLI's credentials, its rule for following redirects, and `history`/`token`.

Credentials: `--ca` (verify the server), `--cert`/`--key` (a client certificate, for
mTLS), `--token-file` or `$MIRRORLINE_TOKEN` (a bearer token, sent only over TLS). Each
option also reads an environment variable, so a shell or a container sets them once.

Redirects: a standby answers with the leader's address. The CLI follows it only when it
can verify whoever answers there -- over TLS, against the CA it was given -- or when the
address is on this machine (loopback). A plaintext redirect elsewhere is refused:
otherwise any server could send the CLI's requests (and their contents) wherever it likes.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from mirrorline.core.errors import ConfigError
from mirrorline.core.security import hash_token, is_loopback, new_token
from mirrorline.grpcsecure import ClientCredentials, token_from_environment

ENVIRONMENT = {"ca": "MIRRORLINE_CA", "cert": "MIRRORLINE_CERT", "key": "MIRRORLINE_KEY",
               "token_file": "MIRRORLINE_TOKEN_FILE", "server_name": "MIRRORLINE_SERVER_NAME"}


def add_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    def default() -> object:
        return None if defaults else argparse.SUPPRESS

    parser.add_argument("--ca", default=default(), metavar="PEM",
                        help="CA certificate that signed the controller's certificate: "
                             "connect with TLS (default: $MIRRORLINE_CA)")
    parser.add_argument("--cert", default=default(), metavar="PEM",
                        help="client certificate, for mTLS (default: $MIRRORLINE_CERT)")
    parser.add_argument("--key", default=default(), metavar="PEM",
                        help="its private key (default: $MIRRORLINE_KEY)")
    parser.add_argument("--token-file", default=default(), metavar="FILE",
                        help="file holding a bearer token (default: $MIRRORLINE_TOKEN_FILE; "
                             "$MIRRORLINE_TOKEN gives the token itself)")
    parser.add_argument("--server-name", default=default(), metavar="NAME",
                        help="name to verify the server's certificate by, when it differs "
                             "from the host in --server (default: $MIRRORLINE_SERVER_NAME)")


def credentials(args: argparse.Namespace) -> ClientCredentials:
    """The credentials the options and environment give; ConfigError names the option."""
    def pick(name: str) -> str | None:
        value = getattr(args, name, None)
        return value if value else (os.environ.get(ENVIRONMENT[name]) or None)

    token_file = pick("token_file")
    return ClientCredentials.from_files(
        ca=pick("ca"), certificate=pick("cert"), key=pick("key"), token_file=token_file,
        token=None if token_file else token_from_environment(),
        server_name=pick("server_name"))


def may_follow(address: str, creds: ClientCredentials) -> bool:
    """Whether a redirect to `address` may be followed (see the module docstring)."""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return creds.tls or is_loopback(host)


def refused_redirect(address: str, leader: str) -> str:
    return (f"the controller at {address} does not lead and points to {leader}; not "
            "following a plaintext redirect to a server whose identity cannot be verified "
            f"(use TLS with --ca, or call --server {leader} deliberately)")


def _token_new(args: argparse.Namespace) -> int:
    token = new_token()
    print(f"token: {token}")
    print(f"tokens-file line: {args.name} {args.role} {hash_token(token)}")
    print("keep the token secret; the tokens file holds only its hash", file=sys.stderr)
    return 0


def register_token(admin_sub: Any) -> None:
    token = admin_sub.add_parser("token", help="make credentials for the tokens file")
    token_sub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    new = token_sub.add_parser("new", help="print a new random token and its tokens-file line")
    new.add_argument("name", help="who the token is for (shown in the audit trail)")
    new.add_argument("role", choices=("viewer", "operator", "admin", "service"))
    new.set_defaults(handler=_token_new)


__all__ = ["ConfigError", "add_options", "credentials", "may_follow", "refused_redirect",
           "register_token"]
