"""Box leases from one Ray cluster: a trial holds the boxes its layout needs, no two trials share one.

Each box is a Ray node that carries one unit of the custom resource `autotune_box` and one of
`autotune_box_<i>` (i: the box's index, its place in the cluster file). A lease of n boxes is a
Ray placement group of n bundles `{autotune_box: 1}` with the STRICT_SPREAD strategy: Ray picks
the boxes (n different nodes), and because a box has one unit, a box in a lease is in no other
until that lease is removed. Which boxes Ray picked is read back from the placement group's table
and the nodes' `autotune_box_<i>` resources.

`BoxPool.local(n)` starts n Ray nodes on this host standing in for boxes (Ray's own multi-node
test cluster, `ray.cluster_utils.Cluster`: the CPU test bed; each raylet shares this host's cores).
Its Ray processes share the fate of this process: a kill -9 of autotune takes them down too, and
with them every lease. The engine on a leased box is started by the study's launcher as before;
the lease only says where, and that nobody else is there.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import TracebackType

from autotune.errors import ConfigError

BOX_RESOURCE = "autotune_box"
#: how long a lease may wait for its boxes before the study gives up (a box never freed is a bug)
LEASE_TIMEOUT_S = 3600.0


def box_resource(index: int) -> str:
    """The resource naming box `index` (one unit, on that box's Ray node only)."""
    return f"{BOX_RESOURCE}_{index}"


def box_resources(index: int) -> dict[str, float]:
    """What the Ray node standing for box `index` carries: `ray start --resources` of that box."""
    return {BOX_RESOURCE: 1.0, box_resource(index): 1.0}


@dataclass(frozen=True)
class Lease:
    """Boxes held by one launch (box indices, sorted) and the placement group that holds them."""

    boxes: tuple[int, ...]
    group: object = field(compare=False, repr=False)

    def label(self) -> str:
        return boxes_label(self.boxes)


def boxes_label(boxes: list[int] | tuple[int, ...]) -> str:
    """`box 0` / `boxes 0,1`: how records and progress name where a launch ran."""
    return ("box " if len(boxes) == 1 else "boxes ") + ",".join(map(str, boxes))


class BoxPool:
    """The boxes of one study, leased through Ray placement groups (see the module docstring).

    Thread safe: trials lease and release from the threads that launch them."""

    def __init__(self, boxes: int, cluster: object | None = None) -> None:
        self.boxes = boxes
        self._cluster = cluster  # ray.cluster_utils.Cluster for local stand-ins; None: connected
        self._lock = threading.Lock()
        self._held: dict[int, Lease] = {}

    @classmethod
    def local(cls, boxes: int) -> BoxPool:
        """`boxes` Ray nodes on this host, each one box (no CPUs or GPUs of Ray's own: the
        engines are not Ray tasks, only the box resources are scheduled)."""
        if boxes < 1:
            raise ConfigError(f"a pool needs at least one box, got {boxes}")
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "resources": box_resources(0), "include_dashboard": False},
        )
        for index in range(1, boxes):
            cluster.add_node(num_cpus=0, resources=box_resources(index))
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False, include_dashboard=False)
        cluster.wait_for_nodes()
        return cls(boxes, cluster)

    def __enter__(self) -> BoxPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        import ray

        for lease in list(self._held.values()):
            self.release(lease)
        if ray.is_initialized():
            ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()  # type: ignore[attr-defined]
            self._cluster = None

    def lease(self, count: int, timeout_s: float = LEASE_TIMEOUT_S) -> Lease:
        """`count` boxes no other lease holds, waiting until Ray has them free."""
        if count > self.boxes:
            raise ConfigError(f"a launch needs {count} boxes; the pool has {self.boxes}")
        from ray.util.placement_group import placement_group, remove_placement_group

        group = placement_group([{BOX_RESOURCE: 1.0}] * count, strategy="STRICT_SPREAD")
        if not group.wait(timeout_s):
            remove_placement_group(group)
            raise TimeoutError(f"no {count} free boxes within {timeout_s:.0f} s")
        lease = Lease(boxes=self._boxes_of(group), group=group)
        with self._lock:
            self._held[id(group)] = lease
        return lease

    def release(self, lease: Lease) -> None:
        from ray.util.placement_group import remove_placement_group

        with self._lock:
            if self._held.pop(id(lease.group), None) is None:
                return
        remove_placement_group(lease.group)

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._held.values())

    @staticmethod
    def _boxes_of(group: object) -> tuple[int, ...]:
        import ray
        from ray.util.placement_group import placement_group_table

        node_box: dict[str, int] = {}
        for node in ray.nodes():
            for name in node.get("Resources", {}):
                suffix = name.removeprefix(BOX_RESOURCE + "_")
                if name != suffix and suffix.isdigit():
                    node_box[node["NodeID"]] = int(suffix)
        nodes = placement_group_table(group)["bundles_to_node_id"].values()
        return tuple(sorted(node_box[n] for n in nodes))


def parallel_default(boxes: int, per_trial: int) -> int:
    """How many trials fit side by side: as many as the boxes allow (1 when each needs them all)."""
    return max(1, boxes // max(1, per_trial))


def check_parallel(parallel: int, boxes: int, per_trial: int) -> None:
    """Refuse `--parallel K` that the boxes cannot hold (ConfigError, before anything starts)."""
    if parallel < 1:
        raise ConfigError(f"--parallel {parallel}: at least 1")
    if parallel * per_trial > boxes:
        raise ConfigError(
            f"--parallel {parallel}: each trial needs {per_trial} box(es), so {parallel} in flight need "
            f"{parallel * per_trial}; there are {boxes} (add boxes with --boxes or the cluster file)"
        )
