"""Undoing what a docker run left: its containers, its network and the shared node image, each only when it
is labelled as chaos's (``chaos=1`` and, but for the image, ``chaos.run``). ``docker`` is a Docker client (None:
no engine answers). Each returns (status, detail), as every undo of :mod:`chaos.cleanup.undo` does."""

from __future__ import annotations

from typing import Any

from chaos.cleanup.outcome import FAILED, GONE, KEPT, REMOVED


def ours(obj: Any) -> bool:
    labels = (getattr(obj, "labels", None) if hasattr(obj, "labels") else None) or obj.attrs.get("Labels") or {}
    return labels.get("chaos") == "1" and bool(labels.get("chaos.run"))


def undo_container(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    if docker is None:
        return FAILED, "no Docker engine answers"
    import docker.errors as derr

    try:
        c = docker.containers.get(str(ids["name"]))
    except derr.NotFound:
        return GONE, "no such container"
    if not ours(c):
        return KEPT, "not labelled chaos=1 and chaos.run: not ours"
    try:
        if c.status == "paused":
            c.unpause()
        c.remove(force=True, v=True)
    except derr.NotFound:
        return GONE, "no such container"
    except Exception as exc:
        return FAILED, f"docker rm -f {c.name}: {exc}"[:300]
    return REMOVED, f"container ({c.status})"


def undo_network(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    if docker is None:
        return FAILED, "no Docker engine answers"
    import docker.errors as derr

    name = str(ids["name"])
    nets = [n for n in docker.networks.list(names=[name]) if n.name == name]
    if not nets:
        return GONE, "no such network"
    for net in nets:
        if not ours(net):
            return KEPT, "not labelled chaos=1 and chaos.run: not ours"
        try:
            net.remove()
        except derr.NotFound:
            continue
        except Exception as exc:
            return FAILED, f"docker network rm {name}: {exc}"[:300]
    return REMOVED, "network"


def undo_image(ids: dict[str, Any], docker: Any, busy: bool = False) -> tuple[str, str]:
    if docker is None:
        return FAILED, "no Docker engine answers"
    import docker.errors as derr

    tag = str(ids["tag"])
    try:
        image = docker.images.get(tag)
    except derr.ImageNotFound:
        return GONE, "no such image"
    if (image.labels or {}).get("chaos") != "1":
        return KEPT, "not labelled chaos=1: not ours"
    users = [c.name for c in docker.containers.list(all=True) if c.image is not None and c.image.id == image.id]
    if users:
        return KEPT, f"the shared node image is used by {', '.join(users[:3])}"
    if busy:
        return KEPT, "the shared node image: other chaos runs are alive and may start containers of it"
    try:
        docker.images.remove(image.id, force=False)
    except derr.ImageNotFound:
        return GONE, "no such image"
    except Exception as exc:
        return KEPT, f"in use ({exc})"[:300]
    return REMOVED, "built node image"


__all__ = ["ours", "undo_container", "undo_image", "undo_network"]
