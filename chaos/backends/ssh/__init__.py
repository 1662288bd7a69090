"""Backend ``ssh``: every node is a host reached over SSH (:mod:`chaos.backends.ssh.backend`).

``link``: one paramiko connection; ``hostd``: the daemon the runner starts on each host;
``remote``: a host's network namespace for network faults; ``clock``: clock offsets. The test lab of
real sshd hosts in namespaces on this machine is :mod:`chaos.labs.ssh`.
"""
