"""Several replicas splitting the work: membership Leases, project claims, the hash ring.

The pieces, bottom up (issue 17; the facts behind them in notes/sharding.md):

- `Ring` (ring.py): who *should* own a project, over the live members (xxh3_64, virtual nodes);
  `bucket_of` / `bucket_selector`: the assignment label that lets the API server filter watches;
  `layout`: the ring the coordinator places the buckets with (`--placement ring|bounded`:
  `BoundedRing`, consistent hashing with bounded loads, caps each member at (1 + epsilon) x the mean).
- `Fence` (fence.py): our own lease deadline on the local monotonic clock; `check()` before
  every write for an owned project, so a replica paused past its lease writes nothing on waking.
- `MemberLease`, `Liveness`, `read_members` (membership.py): each replica's Lease
  `stead-member-<id>`, renewed every duration/3, and the conservative judgement of who is live.
- `Claim`, `acquire`, `release`, `collect`, `list_claims`, `ClaimCache` (claims.py): who *actually* owns a
  project, a Lease `stead-project-<project>` taken by compare-and-swap, valid while its holder's
  membership is live (claims are written only on hand-over, never renewed), deleted by its holder
  (conditionally) once the project has had no objects for a lease; read by each pass from the
  `ClaimCache` one WATCH per replica keeps.
- `View`, `decide`, `execute`, `Sweep`, `Vacancy` (coordinator.py): from a view to releases,
  acquisitions and collections, the projects left without an owner for too long, and those of
  ours left without objects.
- `ShardMember` (runner.py): all of it running for one replica; `owns(project)`, `fence`, and the
  `drain` / `on_acquired` hooks are what the reconciler will use.

- `FencedKube`, `NotOwned` (guard.py): the API client every write of the engine goes through
  with `--sharding leases`: a write for a namespace none of whose projects we hold, or with our
  fence closed, is refused before it is sent.

`Sharding` (wiring.py): `stead operator --sharding leases` wires a `ShardMember` to the
reconcilers (`operators.runtime.process`) and makes the watches of namespaced kinds select the
buckets the ring places on this replica (`follow`), so that the API server sends it only its
share; `Labeller` (labelling.py) labels the objects the mutating webhook did not. The default
(`off`) keeps `core.ring.Ownership` with static membership: one replica owns everything.
"""

from operators.runtime.shard.claims import (
    CLAIM_ROLE,
    HOLDER_INCARNATION_ANNOTATION,
    Claim,
    ClaimCache,
    ClaimMismatch,
    acquire,
    claim_name,
    collect,
    list_claims,
    read_claim,
    release,
)
from operators.runtime.shard.coordinator import (
    Decision,
    Outcome,
    Sweep,
    Vacancy,
    View,
    decide,
    execute,
    owned,
    ring_members,
)
from operators.runtime.shard.fence import Fence, FenceExpired, default_clock
from operators.runtime.shard.guard import FencedKube, NotOwned, WriteGuard
from operators.runtime.shard.leases import NAME_LABEL, ROLE_LABEL, leases_path
from operators.runtime.shard.membership import (
    DEFAULT_DURATION,
    DEFAULT_SKEW,
    INCARNATION_ANNOTATION,
    MEMBER_ROLE,
    Liveness,
    MemberLease,
    MemberRecord,
    member_lease_name,
    read_members,
)
from operators.runtime.shard.ring import (
    BUCKET_LABEL,
    CLUSTER_PROJECT,
    DEFAULT_BUCKETS,
    DEFAULT_EPSILON,
    DEFAULT_VNODES,
    Balance,
    BoundedRing,
    Placement,
    Ring,
    bucket_keys,
    bucket_label,
    bucket_of,
    bucket_selector,
    buckets_of,
    by_bucket,
    layout,
    moved_fraction,
    point,
)
from operators.runtime.shard.runner import COLLECTED_METRIC, ShardMember
from operators.runtime.shard.wiring import ProjectWork, Sharding

__all__ = [
    "BUCKET_LABEL",
    "CLAIM_ROLE",
    "CLUSTER_PROJECT",
    "COLLECTED_METRIC",
    "DEFAULT_BUCKETS",
    "DEFAULT_DURATION",
    "DEFAULT_EPSILON",
    "DEFAULT_SKEW",
    "DEFAULT_VNODES",
    "HOLDER_INCARNATION_ANNOTATION",
    "INCARNATION_ANNOTATION",
    "MEMBER_ROLE",
    "NAME_LABEL",
    "ROLE_LABEL",
    "Balance",
    "BoundedRing",
    "Claim",
    "ClaimCache",
    "ClaimMismatch",
    "Decision",
    "Fence",
    "FenceExpired",
    "FencedKube",
    "Liveness",
    "MemberLease",
    "MemberRecord",
    "NotOwned",
    "Outcome",
    "Placement",
    "ProjectWork",
    "Ring",
    "ShardMember",
    "Sharding",
    "Sweep",
    "Vacancy",
    "View",
    "WriteGuard",
    "acquire",
    "bucket_keys",
    "bucket_label",
    "bucket_of",
    "bucket_selector",
    "buckets_of",
    "by_bucket",
    "claim_name",
    "collect",
    "decide",
    "default_clock",
    "execute",
    "layout",
    "leases_path",
    "list_claims",
    "member_lease_name",
    "moved_fraction",
    "owned",
    "point",
    "read_claim",
    "read_members",
    "release",
    "ring_members",
]
