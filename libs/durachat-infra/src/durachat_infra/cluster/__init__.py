"""Cluster membership, rendezvous ownership and conversation leases."""

from durachat_infra.cluster.lease import LeaseGrant, LeaseHeldError, Leases
from durachat_infra.cluster.membership import ClusterView, ShardInfo, ShardRegistration
from durachat_infra.cluster.rendezvous import owner_of
from durachat_infra.cluster.wake import RECOVER_PATH, wake_owner

__all__ = [
    "RECOVER_PATH",
    "ClusterView",
    "LeaseGrant",
    "LeaseHeldError",
    "Leases",
    "ShardInfo",
    "ShardRegistration",
    "owner_of",
    "wake_owner",
]
