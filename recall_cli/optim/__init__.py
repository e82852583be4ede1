"""RecAdam and its annealing coefficient."""

from .anneal import ANNEAL_FUNCTIONS, RecallSchedule, anneal_lambda, pull_weight, recall_state
from .distance import distance_to_theta_star
from .recadam import RecAdam

__all__ = ["ANNEAL_FUNCTIONS", "RecAdam", "RecallSchedule", "anneal_lambda", "distance_to_theta_star", "pull_weight", "recall_state"]
