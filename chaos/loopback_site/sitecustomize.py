"""Run by Python at start-up in a ``local`` run's workers (this directory is first on their ``PYTHONPATH``):
the stores torch opens listen on loopback only (:mod:`chaos.loopback`). Then the ``sitecustomize`` this one
stands before on ``sys.path``, if there is one, runs as it would have. Nothing here may stop the job from
starting."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from chaos.loopback import install_import_hook

    install_import_hook()
except Exception as exc:  # a job that cannot import chaos still runs, with torch's own stores
    print(f"chaos: the job's stores are not bound to loopback ({type(exc).__name__}: {exc})", file=sys.stderr)

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
if _spec is not None and _spec.loader is not None:
    _theirs = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _theirs
    _spec.loader.exec_module(_theirs)
