"""Test labs: real networks, hosts and clusters made on this machine by a test or a benchmark, and
gone after it. Every lab needs root.

- :mod:`chaos.labs.base` — what every lab does: its commands, its namespaces on a bridge, its
  teardown (:class:`~chaos.labs.base.Lab`) and what of it is left.
- :mod:`chaos.labs.hosts` — hosts on a bridge of this machine, each with an ``sshd`` in namespaces of
  its own (:class:`~chaos.labs.hosts.HostsLab`, what the ssh and Slurm labs share).
- :mod:`chaos.labs.netns` — throwaway namespaces on a private bridge (:class:`~chaos.labs.netns.NetLab`).
- :mod:`chaos.labs.ssh` — N real ``sshd`` hosts (:class:`~chaos.labs.ssh.SshLab`).
- :mod:`chaos.labs.slurm` — a real Slurm cluster (:class:`~chaos.labs.slurm.SlurmLab`).
"""
