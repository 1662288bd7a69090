"""The node image of the ``docker`` backend, made without a registry.

Two ways to get one:

* **built** (``image:`` not given): an image imported from a tiny tar (``/tmp`` and the host's
  top-level symlinks such as ``bin -> usr/bin``), tagged ``chaos-node:<hash>`` and labelled
  ``chaos=1``. Containers of it run *this host's* interpreter and virtual environment: the system
  directories (``/usr``, ...), the interpreter's prefixes, every directory on ``sys.path``, the chaos
  source tree and the target script's directory are bind-mounted read-only at the same paths, and
  the run directory read-write, so events, checkpoints and logs land on the host.
* **yours** (``image: my/training:tag``, already on this machine, with torch): only the run
  directory, the script's directory and the ``chaos`` package are mounted; ``chaos.probe`` (standard
  library and torch only) is imported through ``PYTHONPATH`` (before the image's own entries). The
  image's ENTRYPOINT is replaced (the container runs ``sh`` and the torchrun agent), its ENV is kept,
  and the interpreter is ``python:`` or ``python`` on the image's PATH.

Either way the containers run as this host's uid:gid, so what lands in the run directory is the
user's.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.paths import package_root
from chaos.reserve import FileLock

REPOSITORY = "chaos-node"
LABEL = "chaos"  # every image, network and container chaos creates carries chaos=1
LAYOUT_VERSION = "1"  # bump when the built image's content or mounts change meaning

# read-only system paths a host interpreter (and torch, gloo, sh) may need, where they exist
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/ssl",
              "/etc/ca-certificates", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime",
              "/etc/protocols", "/etc/services", "/etc/gai.conf", "/etc/host.conf")
# host variables that shape a torch job and so pass into built-image containers
PASS_ENV_PREFIXES = ("TORCH", "GLOO_", "NCCL_", "OMP_", "MKL_", "KMP_", "PYTORCH_")
PASS_ENV = ("LANG", "LC_ALL", "TZ")


@dataclass(frozen=True)
class Mount:
    """A bind mount: host path ``src`` at the same path in the container, ``ro`` or ``rw``."""

    src: str
    mode: str = "ro"


@dataclass
class NodeImage:
    """What a node container is made of: the image, the interpreter in it, mounts and base environment."""

    ref: str
    python: str
    mounts: list[Mount]
    env: dict[str, str] = field(default_factory=dict)
    built: bool = False

    def binds(self) -> dict[str, dict[str, str]]:
        """The mounts in the Docker SDK's ``binds`` form."""
        return {m.src: {"bind": m.src, "mode": m.mode} for m in self.mounts}


def chaos_source_dir() -> Path:
    """The directory that contains the ``chaos`` package (its parent goes on ``PYTHONPATH``)."""
    return package_root().parent


def _top_level_links() -> dict[str, str]:
    """Host top-level entries that are symlinks (``/bin -> usr/bin`` on merged-/usr systems)."""
    links = {}
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            links[path.lstrip("/")] = os.readlink(path)
    return links


def built_tag() -> str:
    """``chaos-node:<12 hex>``: a hash of the host interpreter, its prefixes and the root's symlinks,
    so a different virtual environment (or host layout) gets its own image."""
    blob = "\n".join([LAYOUT_VERSION, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix,
                      repr(sorted(_top_level_links().items()))])
    return f"{REPOSITORY}:{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def _rootfs_tar() -> bytes:
    """The built image's whole content: ``/tmp`` (mode 1777) and the host's top-level symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
        for name, target in sorted(_top_level_links().items()):
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
    return buf.getvalue()


def ensure_built_image(client: Any, manifest: Any = None) -> str:
    """The tag of the built node image, importing it first if this engine lacks it (about 0.1 s).

    Runs that start at once import it once: the look and the import happen under a machine-wide
    lock (two imports would each make an image, and the second's tag would leave the first one
    untagged behind). An import is written down in ``manifest`` (a :class:`chaos.manifest.Manifest`),
    if given, before it is made. Raises ``docker.errors.DockerException`` if the engine refuses the import."""
    import docker.errors

    tag = built_tag()
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    with FileLock("docker-node-image"):
        try:
            client.images.get(tag)  # another run imported it while we waited
            return tag
        except docker.errors.ImageNotFound:
            pass
        repo, _, version = tag.partition(":")
        if manifest is not None:
            manifest.add("image", tag=tag)
        client.api.import_image_from_data(
            _rootfs_tar(), repository=repo, tag=version,
            changes=[f"LABEL {LABEL}=1", f"LABEL chaos.python={os.path.realpath(sys.executable)}"])
        client.images.get(tag)  # raises ImageNotFound if the import did not land
    return tag


def _dedupe(paths: list[str]) -> list[str]:
    """Existing absolute paths, each as given and resolved (a path reached through a symlink must
    work in the container too), without those inside another one of the list."""
    found = set()
    for p in paths:
        if p and os.path.isabs(p) and os.path.exists(p):
            found |= {os.path.normpath(p), os.path.realpath(p)}
    kept: list[str] = []
    for p in sorted(found):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


def host_python_paths(python: str | None = None) -> list[str]:
    """What a host interpreter needs to run the same way in a container. This process's own
    (``python`` None or ``sys.executable``): its prefixes and every entry of ``sys.path`` (editable
    installs included). Another one: the prefix of its path and of its real file, and for a virtual
    environment the base interpreter's prefix (``home`` in ``pyvenv.cfg``)."""
    if python is None or os.path.abspath(python) == os.path.abspath(sys.executable):
        exe = os.path.realpath(sys.executable)
        paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                 os.path.dirname(os.path.dirname(exe))]
        return paths + [p for p in sys.path if p and os.path.isabs(p)]
    given = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    paths = [given, os.path.dirname(os.path.dirname(os.path.realpath(python)))]
    try:
        for line in Path(given, "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(os.path.dirname(value.strip()))
    except OSError:
        pass
    return paths


def node_image(client: Any, image: str | None, python: str | None, script_dir: Path, run_dir: Path,
               manifest: Any = None) -> NodeImage:
    """The image and mounts of every node of a run.

    ``image`` None: the built image (imported now if missing), the host interpreter (``python`` or
    ``sys.executable``) and read-only mounts of the system and Python paths. Otherwise the user's
    image, ``python`` or ``python``. The run directory is always mounted read-write; ``manifest``
    records an import of the built image. Raises
    ``docker.errors.ImageNotFound`` if ``image`` is not on this machine (nothing is pulled)."""
    src = str(chaos_source_dir())
    run = os.path.abspath(run_dir)
    if image is None:
        ref = ensure_built_image(client, manifest)
        exe = python or sys.executable
        system = [p for p in SYSTEM_DIRS if os.path.exists(p) and not os.path.islink(p)]
        system += [p for p in SYSTEM_ETC if os.path.exists(p)]
        ro = _dedupe([*system, *host_python_paths(python), src, str(script_dir)])
        env = {k: v for k, v in os.environ.items() if k in PASS_ENV or k.startswith(PASS_ENV_PREFIXES)}
        env.setdefault("LANG", "C.UTF-8")
        env["PATH"] = f"{os.path.dirname(exe)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        env["HOME"] = os.environ.get("HOME", "/tmp")
        env["PYTHONPATH"] = src
        mounts = [Mount(p) for p in ro if p != run]
        return NodeImage(ref, exe, [*mounts, Mount(run, "rw")], env, built=True)
    attrs = client.images.get(image).attrs
    image_env = dict(e.split("=", 1) for e in (attrs.get("Config") or {}).get("Env") or [] if "=" in e)
    pythonpath = ":".join(p for p in (src, image_env.get("PYTHONPATH", "")) if p)
    ro = _dedupe([str(Path(src) / "chaos"), str(script_dir)])
    mounts = [Mount(p) for p in ro if p != run]
    return NodeImage(image, python or "python", [*mounts, Mount(run, "rw")], {"PYTHONPATH": pythonpath})


def remove_built_images(client: Any) -> list[str]:
    """Remove every image labelled ``chaos=1`` that no container uses; returns their ids.
    Never raises (an image in use is left)."""
    removed: list[str] = []
    try:
        images = client.images.list(filters={"label": f"{LABEL}=1"})
    except Exception:
        return removed
    for img in images:
        try:
            client.images.remove(img.id, force=False)
            removed.append(img.id)
        except Exception:
            continue
    return removed
