"""RecAdam and its annealing coefficient."""

from .anneal import ANNEAL_FUNCTIONS, anneal_lambda
from .distance import distance_to_theta_star
from .kernels import pull_weight
from .recadam import RecAdam

__all__ = ["ANNEAL_FUNCTIONS", "RecAdam", "anneal_lambda", "distance_to_theta_star", "pull_weight"]
