"""Fabric specs: the network between each serving instance and the cluster's shared KV pool.

A :class:`FabricSpec` is plain data: every instance reaches the shared tiers over its own link
(``link_bandwidth`` bytes/s per direction, ``latency_s`` per transfer), and all links together
move at most ``aggregate_bandwidth`` bytes/s per direction (the switch or bus the links share).
The cluster simulator queues transfers on these links; :meth:`FabricSpec.transfer_seconds` is
one transfer on an idle link.  Presets quote published port and switch figures; latencies that
no vendor publishes for this path are marked as assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvmm._validate import as_positive_float
from kvmm.errors import BadInputError
from kvmm.tiers.spec import GB, LINK_PRESETS, TB, TierSpec

__all__ = ["FabricSpec", "FABRIC_PRESETS", "FABRIC_ALIASES", "LINK_NAMES", "fabric_preset", "link_by_name"]


@dataclass(frozen=True)
class FabricSpec:
    """Per-instance link plus the aggregate the links share (bandwidths in bytes/s, one direction).

    ``aggregate_bandwidth`` must be at least ``link_bandwidth`` (a single transfer can always use
    its whole link).
    """

    name: str
    link_bandwidth: float
    latency_s: float
    aggregate_bandwidth: float
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise BadInputError(f"fabric name must be a non-empty string, got {self.name!r}")
        link = as_positive_float(self.link_bandwidth, "link_bandwidth")
        latency = as_positive_float(self.latency_s, "latency_s", allow_zero=True)
        aggregate = as_positive_float(self.aggregate_bandwidth, "aggregate_bandwidth")
        if aggregate < link:
            raise BadInputError(f"aggregate_bandwidth ({aggregate:g} B/s) must be >= link_bandwidth ({link:g} B/s): "
                                "the links share the aggregate, and one transfer can use its whole link")
        object.__setattr__(self, "link_bandwidth", link)
        object.__setattr__(self, "latency_s", latency)
        object.__setattr__(self, "aggregate_bandwidth", aggregate)

    def transfer_seconds(self, nbytes: int) -> float:
        """Seconds for one transfer of ``nbytes`` on an idle link: ``latency_s + nbytes / link_bandwidth``.

        Runtime complexity: O(1).
        """
        return self.latency_s + as_positive_float(nbytes, "nbytes", allow_zero=True) / self.link_bandwidth

    @property
    def full_rate_links(self) -> float:
        """How many links can run at full rate at once before the aggregate limits them."""
        return self.aggregate_bandwidth / self.link_bandwidth

    def as_link(self) -> TierSpec:
        """The per-instance link as a capacity-less :class:`TierSpec` (the shape of ``LINK_PRESETS``)."""
        return TierSpec(self.name, 0, self.link_bandwidth, self.link_bandwidth, self.latency_s, source=self.source)


#: fabric name -> the link preset its per-instance link is (the fabrics built by ``_from_link``)
_LINK_OF: dict[str, str] = {}


def _from_link(name: str, link: str, aggregate_bandwidth: float, source: str) -> FabricSpec:
    """A fabric whose per-instance link is the link preset ``link`` (same bandwidth and latency)."""
    _LINK_OF[name] = link
    spec = LINK_PRESETS[link]
    return FabricSpec(name, spec.read_bandwidth, spec.latency_s, aggregate_bandwidth,
                      source=f"link: {spec.source}; aggregate: {source}")


FABRIC_PRESETS: dict[str, FabricSpec] = {
    "rdma200": _from_link("rdma200", "rdma200", 40 * 25 * GB,
                          "NVIDIA Quantum QM8700 HDR InfiniBand switch, 40 ports x 200 Gb/s (16 Tb/s both "
                          "directions): 1 TB/s per direction"),
    "rdma400": _from_link("rdma400", "rdma400", 64 * 50 * GB,
                          "NVIDIA Quantum-2 QM9700 NDR InfiniBand switch, 64 ports x 400 Gb/s (51.2 Tb/s both "
                          "directions): 3.2 TB/s per direction"),
    "ethernet100": FabricSpec("ethernet100", 12.5 * GB, 10e-6, 32 * 12.5 * GB,
                              source="100 GbE NIC (12.5 GB/s nominal) with RoCE v2; 10 us per transfer assumed; "
                                     "aggregate: a 32 x 100 GbE switch (Broadcom Tomahawk class, 3.2 Tb/s): "
                                     "400 GB/s per direction"),
    "nvlink": _from_link("nvlink", "nvlink", 8 * 450 * GB,
                         "NVIDIA HGX H200 8-GPU board: NVSwitch, 7.2 TB/s aggregate NVLink bandwidth (both "
                         "directions): 3.6 TB/s per direction; reaches at most 8 instances"),
    "supernode-ub": FabricSpec("supernode-ub", 1 * TB, 2e-6, 1024 * 1 * TB,
                               source="Huawei Ascend 950DT: 2 TB/s interconnect bandwidth per chip over UnifiedBus "
                                      "(Huawei Connect 2025), half per direction; 2 us per transfer assumed; "
                                      "aggregate: the 1024-card Ascend 950DT supernode (China Telecom Shanghai, "
                                      "256 TB unified memory) assumed non-blocking, 1024 x 1 TB/s; Atlas 950 "
                                      "SuperPoD quotes 16.3 PB/s for 8192 NPUs (about 2 TB/s each)"),
    "supernode-m890": _from_link("supernode-m890", "supernode", 128 * 350 * GB,
                                 "Alibaba Zhenwu M890 supernode: 128 Zhenwu 810E PPUs in one unified-memory "
                                 "scale-up domain, assumed non-blocking: 128 x 350 GB/s per direction"),
    "cross-dc": _from_link("cross-dc", "cross-dc", 12.5 * GB,
                           "assumed: the one 100 Gb/s path between the datacenters carries every instance's "
                           "transfers, so the aggregate is that path's bandwidth"),
}

#: Link-preset spellings of fabrics (``--pd`` names): a link name whose fabric has another name.
FABRIC_ALIASES: dict[str, str] = {link: fabric for fabric, link in _LINK_OF.items()
                                  if link != fabric and link not in FABRIC_PRESETS}
#: The names ``--pd`` and ``--fabric`` (``PDConfig.link``, ``ClusterConfig.fabric``) both accept:
#: every link preset and every fabric preset, each name meaning the same link in both.
LINK_NAMES: tuple[str, ...] = tuple(sorted(set(LINK_PRESETS) | set(FABRIC_PRESETS) | set(FABRIC_ALIASES)))


def fabric_preset(name: str) -> FabricSpec:
    """A fabric preset by name (see :data:`FABRIC_PRESETS`), or a :class:`FabricSpec` as is."""
    if isinstance(name, FabricSpec):
        return name
    name = FABRIC_ALIASES.get(name, name) if isinstance(name, str) else name
    if not isinstance(name, str) or name not in FABRIC_PRESETS:
        raise BadInputError(f"unknown fabric preset {name!r}; expected one of {list(LINK_NAMES)} or a FabricSpec")
    return FABRIC_PRESETS[name]


def link_by_name(name: str) -> TierSpec:
    """The per-instance link ``name`` means in :data:`LINK_NAMES`: a link preset as is, a fabric
    preset's link (the link preset it was built from, else :meth:`FabricSpec.as_link`), so
    ``--pd 2x4:ethernet100`` and ``--fabric cross-dc`` work as ``--fabric ethernet100`` and
    ``--pd 2x4:cross-dc`` do.  Runtime complexity: O(1)."""
    if isinstance(name, str) and name in LINK_PRESETS:
        return LINK_PRESETS[name]
    if isinstance(name, str) and name in FABRIC_PRESETS:
        return LINK_PRESETS[_LINK_OF[name]] if name in _LINK_OF else FABRIC_PRESETS[name].as_link()
    raise BadInputError(f"unknown link preset {name!r}; expected one of {list(LINK_NAMES)}")
