"""``backend.ssh_config``: the ssh backend's hosts looked up in an OpenSSH client config file
(paramiko's :class:`~paramiko.config.SSHConfig`), so a scenario can name hosts by their ``Host``
aliases. HostName, User, Port and IdentityFile are taken; a host's own fields win. ProxyJump and
ProxyCommand are refused: the hosts must reach each other directly (torchrun's rendezvous and the
collectives go host to host at the resolved HostName, not through the runner's jump host). So is
``Match exec``: paramiko would run its command whenever a scenario is loaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chaos.errors import ScenarioError
from chaos.readlimit import MIB, UnsafeFile, read_text

CONFIG_LIMIT = 1 * MIB  # bytes an ssh config file may hold
REFUSED = ("proxyjump", "proxycommand")  # keys paramiko returns lowercased


def read_ssh_config(path: Path, field: str = "backend.ssh_config") -> Any:
    """The parsed config at ``path`` (a :class:`paramiko.SSHConfig`). Raises
    :class:`~chaos.errors.ScenarioError` naming ``field`` and the file when it is missing,
    unreadable, not text or not a config paramiko can parse."""
    import paramiko

    try:
        text = read_text(path, CONFIG_LIMIT, follow=True)
    except (UnsafeFile, OSError) as exc:
        raise ScenarioError([f"{field}={str(path)!r}: cannot read it ({exc.strerror or exc}); give the path of an "
                             "OpenSSH client config file (relative paths are relative to the scenario file)"]) from None
    except UnicodeDecodeError:
        raise ScenarioError([f"{field}={str(path)!r}: not UTF-8 text; give an OpenSSH client config file"]) from None
    for n, line in enumerate(text.splitlines(), 1):
        words = line.replace("=", " ").split()
        if words and words[0].lower() == "match" and "exec" in (w.lower() for w in words[1:]):
            raise ScenarioError([f"{field}={str(path)!r} line {n}: Match exec runs a command when the config is "
                                 "read, which loading a scenario must not do; give a config without Match exec "
                                 "(Host entries)"])
    try:
        return paramiko.SSHConfig.from_text(text)
    except Exception as exc:  # paramiko raises ConfigParseError, ValueError, ... for a bad line
        raise ScenarioError([f"{field}={str(path)!r}: paramiko cannot parse it ({exc}); fix that line"]) from None


def resolve_host(host: dict[str, Any], config: Any, where: str, field: str = "backend.ssh_config") -> dict[str, Any]:
    """``host`` (a raw ``backend.hosts[]`` mapping: address, user?, port?, key?) with its ``address``
    looked up as a ``Host`` alias in ``config``: address ← HostName, and user ← User, port ← Port,
    key ← the first IdentityFile (``~`` expanded) where ``host`` does not give them. ``where`` names
    the host in errors (``backend.hosts[1]``). Raises :class:`~chaos.errors.ScenarioError` for a host
    whose config has ProxyJump or ProxyCommand, or a Port that is not a number."""
    alias = host.get("address")
    if not isinstance(alias, str) or not alias:
        return host  # the model says what is wrong with it
    try:
        found = config.lookup(alias)
    except Exception as exc:  # a Match exec that fails, a bad token
        raise ScenarioError([f"{where}.address={alias!r}: {field} lookup failed ({exc}); fix the Host {alias} "
                             "entry"]) from None
    for key in REFUSED:
        if found.get(key) and str(found[key]).lower() != "none":
            name = {"proxyjump": "ProxyJump", "proxycommand": "ProxyCommand"}[key]
            raise ScenarioError([f"{where}.address={alias!r}: {field} gives it {name} {found[key]}, which the ssh "
                                 f"backend does not support (the hosts must reach each other directly); give a "
                                 f"Host entry without {name}, or the host's own address"])
    out = dict(host)
    out["address"] = str(found.get("hostname", alias))
    if "user" not in host and found.get("user"):
        out["user"] = str(found["user"])
    if "port" not in host and found.get("port"):
        try:
            out["port"] = int(found["port"])
        except ValueError:
            raise ScenarioError([f"{where}.address={alias!r}: {field} gives it Port {found['port']!r}, not a "
                                 "number; fix the Host entry"]) from None
    if "key" not in host and found.get("identityfile"):
        out["key"] = os.path.expanduser(str(found["identityfile"][0]))
    return out
