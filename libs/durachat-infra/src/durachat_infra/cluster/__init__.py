"""Cluster membership, rendezvous ownership, conversation leases and signed internal calls."""

from durachat_infra.cluster.lease import LeaseGrant, LeaseHeldError, Leases
from durachat_infra.cluster.membership import ClusterView, ShardInfo, ShardRegistration
from durachat_infra.cluster.rendezvous import owner_of
from durachat_infra.cluster.signing import ClusterAuth, RequireClusterSignature, cluster_auth
from durachat_infra.cluster.wake import RECOVER_PATH, wake_owner

__all__ = [
    "RECOVER_PATH",
    "ClusterAuth",
    "ClusterView",
    "LeaseGrant",
    "LeaseHeldError",
    "Leases",
    "RequireClusterSignature",
    "ShardInfo",
    "ShardRegistration",
    "cluster_auth",
    "owner_of",
    "wake_owner",
]
