"""What a request's variant changes in the stages, as options the stages read.

The A/B protocol (`ctxdb.ab.variants`) names its variants; two of them change a stage
rather than the request: the §7.5 ablation without the impact digest and the §7.6 probe
burying the edge items mid-window. Their names are defined here and ab takes them from
here, so the pipeline never imports ab. (The source ablations edit the request before
construction; a representation ablation selects the policy set of its name.)
"""

from __future__ import annotations

from dataclasses import dataclass

NO_IMPACT_DIGEST = "no_impact_digest"
LITM_BURIED = "litm_buried"


@dataclass(frozen=True)
class StageOptions:
    # derive_gate_inputs adds the digest item of the wider impact (§3.3)
    impact_digest: bool = True
    # order puts the edge-critical items in the middle of the supporting material
    bury_edge_items: bool = False


def stage_options(variant: str) -> StageOptions:
    """The stages' options for a request of ``variant``."""
    return StageOptions(impact_digest=variant != NO_IMPACT_DIGEST,
                        bury_edge_items=variant == LITM_BURIED)
