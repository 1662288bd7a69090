"""The directory a ``local`` run puts first on its agents' and workers' ``PYTHONPATH``: its ``sitecustomize``
binds the stores torch opens to loopback (:mod:`chaos.loopback`). Nothing imports this package."""
