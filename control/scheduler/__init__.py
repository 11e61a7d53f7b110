"""The scheduler: filter → score → bind, as kube-scheduler's default profile."""

from control.scheduler.decision import SCHEDULING_ANNOTATION, Decision, NodeRow
from control.scheduler.scheduler import Scheduler, SchedulerStats, num_feasible_nodes_to_find

__all__ = [
    "SCHEDULING_ANNOTATION",
    "Decision",
    "NodeRow",
    "Scheduler",
    "SchedulerStats",
    "num_feasible_nodes_to_find",
]
