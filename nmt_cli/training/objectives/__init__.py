"""Training objectives: what training minimises, one module each, registered in
:data:`~nmt_cli.registry.OBJECTIVES` and chosen by ``train.objective``.

``build_objective(config, context)`` builds the one the config names (``auto`` resolved by
``TrainConfig.objective_name``); :mod:`.base` holds what they share (``Objective``,
``LossTerms``, ``ObjectiveContext``).
"""

from nmt_cli.training.objectives.base import LossTerms, Objective, ObjectiveContext, build_objective

__all__ = ["LossTerms", "Objective", "ObjectiveContext", "build_objective"]
