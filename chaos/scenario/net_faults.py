"""The network faults of ``schedule:``: delay, loss and bandwidth on a node's outgoing traffic, and
partitions between nodes. Each lasts ``duration_s`` (or until the run ends)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chaos.scenario.trigger import _Healable


class _NodeNetwork(_Healable):
    node: int = Field(ge=0, description="The node whose outgoing traffic is perturbed.")


class DelayFault(_NodeNetwork):
    """Delay every packet the node sends (netem, or the NFQUEUE delayer where the kernel has no netem). With
    backend.replica_groups, node N is replica group N: what its processes send on loopback is delayed."""

    fault: Literal["delay"]
    delay_ms: float = Field(gt=0, le=10_000, description="Added one-way delay, ms.")
    jitter_ms: float = Field(default=0, ge=0, description="Uniform jitter ±jitter_ms, ms.")
    correlation_pct: float = Field(default=0, ge=0, le=100, description="Correlation of each delay with the "
                                   "previous one, percent (netem's).")
    mechanism: Literal["auto", "netem", "nfqueue"] = Field(
        default="auto", description="auto: netem where the kernel has it, else the NFQUEUE delayer.")

    @model_validator(mode="after")
    def _jitter(self) -> DelayFault:
        if self.jitter_ms > self.delay_ms:
            raise ValueError(f"jitter_ms={self.jitter_ms:g} must not exceed delay_ms={self.delay_ms:g}")
        return self

    def describe(self) -> str:
        jit = f" ± {self.jitter_ms:g} ms" if self.jitter_ms else ""
        return f"delay node {self.node}'s packets by {self.delay_ms:g} ms{jit} {self.trigger.describe()}{self._span()}"


class LossFault(_NodeNetwork):
    """Drop a random share of the packets the node sends (netem loss, or iptables -m statistic)."""

    fault: Literal["loss"]
    percent: float = Field(gt=0, le=100, description="Share of packets dropped, percent.")
    mechanism: Literal["auto", "netem", "iptables"] = Field(
        default="auto", description="auto: netem where the kernel has it, else iptables -m statistic.")

    def describe(self) -> str:
        return f"drop {self.percent:g}% of node {self.node}'s packets {self.trigger.describe()}{self._span()}"


class BandwidthFault(_NodeNetwork):
    """Cap the node's outgoing bandwidth with a token bucket (tc tbf)."""

    fault: Literal["bandwidth"]
    rate_kbit: int = Field(gt=0, description="Rate, kbit/s.")
    burst_bytes: int = Field(default=32_768, gt=0, description="Bucket size, bytes.")
    latency_ms: float = Field(default=100, gt=0, description="Longest a packet may wait in the bucket, ms.")

    def describe(self) -> str:
        return f"cap node {self.node} at {self.rate_kbit} kbit/s {self.trigger.describe()}{self._span()}"


class PartitionFault(_Healable):
    """Split the nodes in two sides that cannot reach each other (iptables DROP both ways)."""

    fault: Literal["partition"]
    between: list[list[int]] = Field(description="The two sides, e.g. [[0], [1, 2]].")

    @model_validator(mode="after")
    def _sides(self) -> PartitionFault:
        if len(self.between) != 2 or not all(self.between):
            raise ValueError("between: give two non-empty lists of nodes, e.g. [[0], [1, 2]]")
        if set(self.between[0]) & set(self.between[1]):
            raise ValueError(f"between: nodes {sorted(set(self.between[0]) & set(self.between[1]))} are on both "
                             "sides; a node belongs to one side")
        return self

    def describe(self) -> str:
        a, b = (",".join(map(str, side)) for side in self.between)
        return f"partition nodes {{{a}}} | {{{b}}} {self.trigger.describe()}{self._span()}"
