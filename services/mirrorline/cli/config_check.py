"""`mirrorline config check FILE` and `mirrorline --version`.

`config check` is the `nginx -t` of Mirrorline: it loads the file exactly as the services will
(config providers resolved, every client setting translated, every TLS store loaded) without
connecting anywhere, and prints what it understood -- the flows with their topic filters, the
naming policy with example names, each client's settings, and the declared defaults that
differ from MM2's and are in effect -- so an operator sees MM2's meaning of their file
before anything runs. Secret values are masked: key names that hold
passwords, keys and JAAS configs, and every value a config provider resolved.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from mirrorline import grpcsecure
from mirrorline.configfile import load_config
from mirrorline.core._config_decl import SETTINGS
from mirrorline.core.config import mask
from mirrorline.core.errors import ConfigError
from mirrorline.core.security import grpc_security
from mirrorline.core.settings import FlowSettings, MirrorSettings

_EXAMPLE_TOPIC = "orders"
#: Any other key (a misspelt `ssl.keystore.pasword` or `sasl.jass.config`, a key the
#: client does not know) whose name looks like it holds a secret: its value is masked too.
_SECRET_LIKE = re.compile(r"pass|pwd|secret|token|jaas|jass|credential|key",
                          re.IGNORECASE)
#: Kafka client keys whose names match `_SECRET_LIKE` but whose values are not secrets.
_VISIBLE = frozenset({
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.certificate.chain",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "key.serializer", "key.deserializer",
})


def register(subparsers: Any) -> None:
    config = subparsers.add_parser("config", help="check an MM2 properties file")
    sub = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    check = sub.add_parser(
        "check", help="validate a properties file without connecting anywhere and print "
                      "what it means (flows, topic filters, naming, client settings; secrets "
                      "masked); exit status 2 on errors, a likely typo (an unknown key "
                      "nearly equal to a known one) included")
    check.add_argument("file", metavar="FILE", help="MM2 dedicated-mode properties file")
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from mirrorline.kafka.preflight import check_clients
    from mirrorline.secretfiles import check_secret_files

    try:
        settings = load_config(args.file)
        client_warnings = check_clients(settings)
        grpc = grpc_security(settings.raw)  # the gRPC security keys, as every service reads them
        # Who may write the tokens file and read the keys, as every service checks them.
        file_warnings = check_secret_files(settings.raw, settings.lines, args.file)
        grpcsecure.load(grpc)               # their files exist and parse
    except ConfigError as exc:
        print(f"mirrorline: configuration error: {exc}", file=sys.stderr)
        return 2
    warnings = (*settings.warnings, *client_warnings, *file_warnings)
    typos = [w for w in warnings if w.suggestions]
    if typos:
        # A misspelt key is ignored, so what it was meant to set silently is not (a typo in
        # `a->b.topics` mirrors every topic): the dry run fails on it, the services warn.
        for warning in warnings:
            if not warning.suggestions:
                print(f"mirrorline: warning: {args.file}: {warning}", file=sys.stderr)
        for typo in typos:
            print(f"mirrorline: configuration error: {args.file}:{typo.line}: {typo.key}: "
                  f"{typo.message}", file=sys.stderr)
        return 2
    print_summary(settings, sys.stdout, warnings=len(warnings))
    print(f"grpc: {'TLS' if grpc.tls else 'plaintext (loopback only)'}"
          f"{', client certificates required' if grpc.client_auth_required else ''}"
          f"{', authenticated' if grpc.authenticates else ', no authentication'}")
    for warning in warnings:
        print(f"mirrorline: warning: {args.file}: {warning}", file=sys.stderr)
    return 0


def print_summary(settings: MirrorSettings, out: TextIO, *, warnings: int) -> None:
    secrets = settings.secret_values
    enabled = settings.enabled_flows()
    print(f"{settings.source_path}: OK ({len(enabled)} enabled flow(s), "
          f"{warnings} warning(s))", file=out)
    print("clusters:", file=out)
    for alias, cluster in settings.clusters.items():
        print(f"  {alias}:", file=out)
        _print_config(cluster.connection, secrets, out, indent=4)
    print("flows:", file=out)
    if not enabled:
        print("  (none enabled: set <source>-><target>.enabled = true)", file=out)
    for flow in enabled:
        _print_flow(flow, secrets, out)
    changed = changed_defaults(settings.raw)
    if changed:
        print("defaults that differ from MM2 (not set in this file; "
              "docs/configuration-keys.md says why):", file=out)
        for key, (mm2, ours) in changed.items():
            print(f"  {key} = {ours} (MM2: {mm2})", file=out)


def _print_flow(flow: FlowSettings, secrets: frozenset[str], out: TextIO) -> None:
    policy = flow.replication_policy
    separator = flow.policy.separator
    print(f"  {flow.name}:", file=out)
    for key, items in (("topics", flow.topics), ("topics.exclude", flow.topics_exclude),
                       ("groups", flow.groups), ("groups.exclude", flow.groups_exclude)):
        print(f"    {key}: {mask(key, _patterns(items), secrets)}", file=out)
    print(f"    naming: {type(policy).__name__}, separator "
          f"{'.' if separator is None else separator!r}"
          + (f", source.cluster.alias {flow.source_cluster_alias!r}"
             if flow.source_cluster_alias is not None else "")
          + (f", target.cluster.alias {flow.target_cluster_alias!r}"
             if flow.target_cluster_alias is not None else ""), file=out)
    print(f"      {_EXAMPLE_TOPIC} on {flow.source} -> "
          f"{flow.remote_topic(_EXAMPLE_TOPIC)} on {flow.target}", file=out)
    print(f"      checkpoints topic on {flow.target}: {flow.checkpoints_topic}", file=out)
    print(f"      offset-syncs topic on {flow.offset_syncs_cluster}: "
          f"{flow.offset_syncs_topic}", file=out)
    print("    refresh: topics "
          + (f"every {flow.refresh_topics_interval_s:g}s" if flow.refresh_topics_enabled
             else "once at start")
          + ", groups "
          + (f"every {flow.refresh_groups_interval_s:g}s" if flow.refresh_groups_enabled
             else "once at start"), file=out)
    c = flow.clients
    for name, config in (("source consumer", c.source_consumer),
                         ("source producer", c.source_producer),
                         ("source admin", c.source_admin),
                         ("target consumer", c.target_consumer),
                         ("target producer", c.target_producer),
                         ("target admin", c.target_admin)):
        print(f"    {name}:", file=out)
        _print_config(config, secrets, out, indent=6)


def changed_defaults(raw: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Declared keys whose Mirrorline default differs from MM2's and that the file sets at
    no level: key -> (MM2's default, Mirrorline's)."""
    return {s.name: (s.mm2_default, s.default) for s in SETTINGS
            if s.mm2_default is not None and s.default is not None
            and s.default != s.mm2_default
            and not any(k == s.name or k.endswith("." + s.name) for k in raw)}


def _patterns(items: tuple[str, ...]) -> str:
    return ", ".join(items) if items else "(nothing)"


def shown(key: str, value: str, secrets: frozenset[str]) -> str:
    """A value as `config check` prints it: masked when the key holds a secret, the value
    came from a config provider, or the key is not a known non-secret one and its name
    looks like a secret's."""
    if key not in _VISIBLE and _SECRET_LIKE.search(key):
        return "[hidden]"
    return mask(key, value, secrets)


def _print_config(config: Mapping[str, str], secrets: frozenset[str], out: TextIO, *,
                  indent: int) -> None:
    for key in sorted(config):
        print(f"{' ' * indent}{key} = {shown(key, config[key], secrets)}", file=out)
