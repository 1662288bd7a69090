"""The disk fault: a FUSE pass-through filesystem over the checkpoint directory that stalls, slows or
fails chosen operations on command. :mod:`chaos.disk.rules` (what to do, pure), :mod:`chaos.disk.hold`
(write holds, pure); the filesystem process :mod:`chaos.disk.fs` with :mod:`chaos.disk.controller`
(the rules in force), :mod:`chaos.disk.passthrough` (the FUSE operations), :mod:`chaos.disk.binding`
(mfusepy with a cheaper path per request), :mod:`chaos.disk.events`
and :mod:`chaos.disk.callers`; :mod:`chaos.disk.protocol` (what the filesystem and the runner share);
:mod:`chaos.disk.mount` (mounting, rules) and :mod:`chaos.disk.unmount` (unmounting, cleanup)."""
