"""Stability: the stated `stability` of a profile agrees with its `deprecated` reason."""

from __future__ import annotations

from oespec.check.rule import CheckContext, Finding, rule


@rule("OE054", "stability-matches-deprecated", requirements=("REQ-VER-013",), category="versions",
      purpose="a profile's `stability` is `deprecated` exactly when the profile gives a `deprecated` "
              "reason (neither one without the other)")
def stability_matches_deprecated(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        stated = profile.stability_given
        # Without `stability:` the stability follows from `deprecated`, so nothing can disagree.
        if not stated:
            continue
        if stated == "deprecated" and not profile.deprecated:
            yield Finding(profile.at("stability"),
                          f"{profile.name}: stability is deprecated, but the profile gives no `deprecated` reason",
                          "add `deprecated: <why, and what replaces it>` (deprecation is explicit), or "
                          "set stability to experimental or stable")
        elif stated != "deprecated" and profile.deprecated:
            yield Finding(profile.at("stability"),
                          f"{profile.name}: stability is {stated}, but the profile is deprecated "
                          f"(line {profile.at('deprecated').line})",
                          "set `stability: deprecated` or leave stability out (it follows from `deprecated`); "
                          "drop `deprecated` only when the deprecation is withdrawn")


RULES = [stability_matches_deprecated]
