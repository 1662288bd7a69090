"""The disk fault: a FUSE pass-through filesystem over the checkpoint directory that stalls, slows or
fails chosen operations on command. :mod:`chaos.disk.rules` (what to do, pure), :mod:`chaos.disk.fs`
(the filesystem process), :mod:`chaos.disk.mount` (mounting, rules, cleanup)."""
