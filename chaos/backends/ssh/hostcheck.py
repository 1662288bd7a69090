"""Reaching one ``ssh`` host and checking that it can run the job: a link to it (:func:`make_link`, not yet
connected) and what its interpreter has (torch, chaos) and whether the target script is there
(:func:`check_host`, :func:`check_link`), for preflight and ``chaos doctor --hosts``."""

from __future__ import annotations

import json
import sys
from typing import Any

from chaos.backends.ssh.link import HostLink
from chaos.errors import CapabilityError
from chaos.scenario import SshBackendSpec


def make_link(spec: SshBackendSpec, node: int) -> HostLink:
    """A link (not yet connected) to ``spec.hosts[node]``."""
    h = spec.hosts[node]
    return HostLink(h.address, h.port, h.user, h.key, spec.known_hosts, spec.host_key_policy == "accept-new")


def check_host(spec: SshBackendSpec, node: int, script: str | None = None) -> dict[str, Any]:
    """Connect to ``hosts[node]`` and check it can run the job (:func:`check_link`)."""
    link = make_link(spec, node).connect()
    try:
        return check_link(link, spec.python or sys.executable, script, spec.kind)
    finally:
        link.close()


def check_link(link: HostLink, python: str, script: str | None = None, kind: str = "ssh") -> dict[str, Any]:
    """Check the host behind ``link`` (connected) can run the job: the interpreter ``python`` with torch
    and chaos, and the script (if given). What was found; raises :class:`~chaos.errors.CapabilityError`
    (for backend ``kind``) naming the host and the fix."""
    probe = ("import json, os, sys; out = {'python': sys.executable, 'euid': os.geteuid()}\n"
             "try:\n import torch; out['torch'] = torch.__version__\nexcept ImportError: out['torch'] = None\n"
             "try:\n import chaos.probe; out['chaos'] = True\nexcept ImportError: out['chaos'] = False\n"
             "print(json.dumps(out))")
    rc, out, err = link.run([python, "-c", probe])
    if rc != 0:
        raise CapabilityError(kind, f"host {link.name}: the interpreter {python} does not run there "
                              f"({(err or out).strip()[-200:]}); set backend.python to the hosts' interpreter")
    try:
        found = json.loads(out.strip().splitlines()[-1])
        assert isinstance(found, dict)
    except (IndexError, ValueError, AssertionError):
        raise CapabilityError(kind, f"host {link.name}: could not read what {python} said ({out.strip()[-200:]!r}); "
                              "does a login script print to stdout there?") from None
    if not found.get("torch"):
        raise CapabilityError(kind, f"host {link.name}: {python} has no torch; install it there "
                              "(`pip install torch`) or set backend.python to an interpreter that has it")
    if not found.get("chaos"):
        raise CapabilityError(kind, f"host {link.name}: {python} cannot import chaos; install chaos there "
                              "(the job imports its probe, and the runner starts its host daemon)")
    if script is not None:
        rc, _, _ = link.run(["test", "-f", script])
        if rc != 0:
            raise CapabilityError(kind, f"host {link.name}: the target script {script} is not there; deploy "
                                  "the job's code at the same path on every host")
    return {"host": link.name, **found}


__all__ = ["check_host", "check_link", "make_link"]
