"""The psychological seed PatientAct adds to a profile (Appendix A/B): a core-belief theme (unlovable /
worthless / helpless) and an attachment style (avoidant / anxious / disorganized, secure excluded).

The theme is not sampled here: it follows from the profile's own core-belief cluster through our map
(`core_belief_themes.yaml`), so it agrees with the formulation the profile already has. The attachment style
is drawn from the paper's prior with a hash of (seed, profile id), so every counsellor, engine and rerun meets
the same patient. Pure: no LLM.
"""

from __future__ import annotations

import hashlib
import random

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindsim.patientact.data import attachment_prior, theme_map
from mindsimkit.profilegen.schemas import Profile


class PsychSeed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    attachment: str = Field(description="Attachment style drawn from the App. A prior (secure excluded)")
    theme: str = Field(description="Core-belief theme mapped from the profile's core-belief cluster")
    cluster: str = Field(description="The profile's core-belief cluster the theme came from")


def psych_seed(profile: Profile, seed: int) -> PsychSeed:
    if profile.situation_profile is not None:
        return situation_seed(profile)
    cluster = profile.written().formulation.core_belief.cluster
    themes = theme_map()
    if cluster not in themes.clusters:
        raise InputError(
            f"profile {profile.profile_id}: core-belief cluster '{cluster}' has no theme in "
            "mindsim/data/patientact/core_belief_themes.yaml; add it there"
        )
    prior = attachment_prior().weights
    digest = hashlib.sha256(f"patientact-attachment|{seed}|{profile.profile_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    styles = sorted(prior)  # sorted: the draw must not depend on the file's key order
    attachment = rng.choices(styles, weights=[prior[s] for s in styles], k=1)[0]
    return PsychSeed(attachment=attachment, theme=themes.clusters[cluster], cluster=cluster)


def situation_seed(profile: Profile) -> PsychSeed:
    """A situation-seeded profile's seed is its sampled scaffold's (the chain wrote its formulation from it): the
    theme by the key `profilegen/data/situation_profile.yaml` gives the authors' label, `cluster` the label itself."""
    from mindsimkit.profilegen.situation_schemas import theme_key

    assert profile.situation_profile is not None
    s = profile.situation_profile.scaffold
    theme = theme_key(profile.situation_profile)
    if theme not in theme_map().themes:
        raise InputError(
            f"profile {profile.profile_id}: core-belief theme '{theme}' (profilegen/data/"
            "situation_profile.yaml) is not in mindsim/data/patientact/core_belief_themes.yaml; add it"
        )
    return PsychSeed(attachment=s.attachment_style, theme=theme, cluster=s.core_belief_theme)


def check_profiles(profiles: list[Profile]) -> None:
    """Fail before any LLM call if a profile's core-belief cluster has no theme (PatientAct runs only)."""
    known = theme_map().clusters
    for p in profiles:
        if p.situation_profile is not None:
            situation_seed(p)
    bad = sorted(
        {p.written().formulation.core_belief.cluster for p in profiles if p.situation_profile is None} - set(known)
    )
    if bad:
        raise InputError(
            f"profiles: core-belief cluster(s) {', '.join(bad)} have no theme in "
            "mindsim/data/patientact/core_belief_themes.yaml; add them there"
        )
