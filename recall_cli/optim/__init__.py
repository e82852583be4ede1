"""RecAdam and its annealing coefficient."""

from .anneal import ANNEAL_FUNCTIONS, anneal_lambda
from .distance import distance_to_anchor
from .recadam import RecAdam, pull_weight

__all__ = ["ANNEAL_FUNCTIONS", "RecAdam", "anneal_lambda", "distance_to_anchor", "pull_weight"]
