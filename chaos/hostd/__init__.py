"""The host daemon: what the runner runs on each ``ssh`` host (or Slurm node), for the length of a run, started as
``python -m chaos.hostd`` (:mod:`chaos.hostd.__main__`). It sits in the top layer, above the run layer, because it
does the runner's work on the host: :mod:`chaos.hostd.daemon` the wire, the run directory and the dead man's
switch; its parts, each serving one protocol of the operations' table (:mod:`chaos.hostops`, which the runner's
:meth:`~chaos.backends.ssh.link.HostLink.ops` reads too): :mod:`chaos.hostd.agent` (the agent,
the run's processes, helpers), :mod:`chaos.hostd.files` (the disk fault's mount, checkpoint damage, the checkpoint
watcher), :mod:`chaos.hostd.blackbox` (the black-box observer), :mod:`chaos.hostd.slurm` (the job's state, in a
Slurm job step); :mod:`chaos.hostd.cleanup` what a dead run left. Nothing below this layer imports it."""
