"""How far a run's final checkpoint is from the reference's: the tolerance oracle of ``equivalent_to_reference``.

A job that resumed at another world size (an elastic job that lost a node, resumed on fewer ranks
with DCP's resharding) does the same computation as the fault-free run up to floating-point
summation order: each step's global batch is summed over other ranks, in another order, so its final
parameters are close to the reference's, not bitwise equal. Digests cannot say *how* close; the
checkpoints can. Both final checkpoints are read whole with DCP's own reader (every rank's shards put
together, whatever world size wrote them, :func:`chaos.dcpcheck.read_tensors`) and compared:

    rel_l2 = ‖θ − θ_ref‖₂ / ‖θ_ref‖₂

over every floating-point tensor of the model (the names under ``model.``, as ``get_state_dict``
puts them; every floating-point tensor when the checkpoint has no ``model.`` part), summed in
float64, with the worst tensor's own distance and the largest elementwise ``|Δ|``. Optimizer state is
not compared: it follows from the parameters.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from chaos.dcpcheck import is_dcp, read_tensors

MODEL_PREFIX = "model."
FEW = 5  # names quoted in an event


def _model_part(tensors: dict[str, Any]) -> dict[str, Any]:
    floating = {k: v for k, v in tensors.items() if v.is_floating_point()}
    model = {k: v for k, v in floating.items() if k.startswith(MODEL_PREFIX)}
    return model or floating


def compare_checkpoints(path: Path, ref_path: Path) -> dict[str, Any]:
    """The fields of a ``final_checkpoint_compared`` event for the DCP checkpoints ``path`` (the run's)
    and ``ref_path`` (the reference's): ``rel_l2`` (float, see the module), ``max_abs`` (largest
    ``|Δ|`` of one element), ``tensors`` and ``elements`` (how many were compared), ``worst`` and
    ``worst_rel_l2`` (the tensor farthest from the reference's, relative to its own norm),
    ``missing`` (tensor names of the reference's the run's checkpoint lacks or holds in another shape,
    the first :data:`FEW`; the distance is then over the rest); or ``error`` alone, saying why nothing
    could be compared (not a DCP directory, unreadable, no tensor in common). Never raises."""
    for p, whose in ((path, "the run's"), (ref_path, "the reference's")):
        if not is_dcp(p):
            return {"error": f"{whose} final checkpoint {p} is not a DCP checkpoint directory (or is gone)"}
    try:
        mine, ref = _model_part(read_tensors(path)), _model_part(read_tensors(ref_path))
    except ValueError as exc:
        return {"error": f"cannot read a final checkpoint: {exc}"}
    except OSError as exc:
        return {"error": f"cannot read a final checkpoint: {exc}"}
    common = sorted(k for k in ref if k in mine and mine[k].shape == ref[k].shape)
    missing = sorted(k for k in ref if k not in common)
    if not common:
        return {"error": f"the final checkpoints have no floating-point tensor in common (the reference's: "
                         f"{', '.join(sorted(ref)[:FEW]) or 'none'})"}
    diff2 = norm2 = 0.0
    max_abs, worst, worst_rel, elements = 0.0, common[0], -1.0, 0
    for k in common:
        a, b = mine[k].double(), ref[k].double()
        d2, n2 = float((a - b).pow(2).sum()), float(b.pow(2).sum())
        diff2, norm2, elements = diff2 + d2, norm2 + n2, elements + b.numel()
        max_abs = max(max_abs, float((a - b).abs().max()) if b.numel() else 0.0)
        rel = math.sqrt(d2 / n2) if n2 else (0.0 if d2 == 0 else math.inf)
        if rel > worst_rel:
            worst, worst_rel = k, rel
    rel_l2 = math.sqrt(diff2 / norm2) if norm2 else (0.0 if diff2 == 0 else math.inf)
    out: dict[str, Any] = {"rel_l2": rel_l2, "max_abs": max_abs, "tensors": len(common), "elements": elements,
                           "worst": worst, "worst_rel_l2": worst_rel}
    if missing:
        out["missing"] = missing[:FEW]
        out["missing_count"] = len(missing)
    return out


__all__ = ["MODEL_PREFIX", "compare_checkpoints"]
