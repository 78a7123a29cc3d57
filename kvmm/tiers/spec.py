"""Tier specifications: capacity plus a bandwidth + latency timing model, with presets.

A :class:`TierSpec` is plain data; every tier backend (``ArenaTier``, ``MmapTier``,
``RedisTier``, ``SimulatedTier``) carries one and answers ``transfer_seconds`` from it, and the
simulator uses specs directly.  Presets quote published figures; where a product publishes no
latency, the value is a typical one for that medium and is marked as an assumption.

Each spec also carries a price for the cost account (:mod:`kvmm.sim.cost`, docs/cost.md):
``usd_per_gib_hour`` for the capacity it holds and ``usd_per_hour`` fixed per tier (an appliance
box, a link).  A hand-built spec is free unless given prices; every preset's price names its
source in ``price_source`` ("assumed" where no list price is published).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvmm._validate import MAX_UNITS, as_count, as_positive_float, short_repr
from kvmm.errors import BadInputError

__all__ = ["TierSpec", "PRESETS", "preset", "LINK_PRESETS", "link_preset", "SHARED_PRESETS",
           "DRAM_USD_PER_GIB_HOUR", "NVME_USD_PER_GIB_HOUR", "DFS_USD_PER_GIB_HOUR"]

GB = 10**9
TB = 10**12
GIB = 2**30
HOURS_PER_MONTH = 730  # the month AWS and Nebius price storage by


@dataclass(frozen=True)
class TierSpec:
    """Capacity and timing of one memory tier.

    ``transfer_seconds(n) = latency_s + n / bandwidth`` (read or write bandwidth).
    ``usd_per_gib_hour`` and ``usd_per_hour`` price it for :func:`kvmm.sim.cost.cost_account`
    (finite, >= 0; they never change a simulation); ``price_source`` cites them.
    """

    name: str
    capacity_bytes: int
    read_bandwidth: float  # bytes/s
    write_bandwidth: float  # bytes/s
    latency_s: float
    persistent: bool = False
    shared: bool = False
    source: str = ""
    usd_per_gib_hour: float = 0.0  # price of the capacity held (the cost account's capacity term)
    usd_per_hour: float = 0.0  # fixed price per tier instance (an appliance box, a link)
    price_source: str = ""

    def __post_init__(self) -> None:
        capacity = self.capacity_bytes
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 0 <= capacity <= MAX_UNITS:
            raise BadInputError(f"capacity_bytes must be an integer in [0, 2**60], got {short_repr(capacity)}")
        as_positive_float(self.read_bandwidth, "read_bandwidth")
        as_positive_float(self.write_bandwidth, "write_bandwidth")
        as_positive_float(self.latency_s, "latency_s", allow_zero=True)
        # prices are stored as floats (an int price would print and compare differently)
        object.__setattr__(self, "usd_per_gib_hour",
                           as_positive_float(self.usd_per_gib_hour, "usd_per_gib_hour", allow_zero=True))
        object.__setattr__(self, "usd_per_hour", as_positive_float(self.usd_per_hour, "usd_per_hour", allow_zero=True))

    def transfer_seconds(self, nbytes: int, *, write: bool = False) -> float:
        """Modelled seconds to read (or write) ``nbytes``: latency + size / bandwidth."""
        if nbytes < 0:
            raise BadInputError(f"nbytes must be >= 0, got {nbytes}")
        bw = self.write_bandwidth if write else self.read_bandwidth
        return self.latency_s + nbytes / bw

    def with_capacity(self, capacity_bytes: int) -> TierSpec:
        """This spec resized: an integer (numpy's too) in [0, 2**60]; text and floats are refused, not converted."""
        return replace(self, capacity_bytes=as_count(capacity_bytes, "capacity_bytes", maximum=MAX_UNITS))


#: Host DRAM, USD per GiB-hour: the price difference of two AWS EC2 on-demand instances that differ
#: only in memory (us-east-1, Linux): r7i.xlarge (4 vCPU, 32 GiB) $0.2646/h minus m7i.xlarge
#: (4 vCPU, 16 GiB) $0.2016/h = $0.063 for 16 GiB.  Cross-check: Nebius AI Cloud billed RAM in
#: H200 VMs at $0.0032 per GiB-hour before Oct 2025 (docs.nebius.com, billing changes Oct 2025).
DRAM_USD_PER_GIB_HOUR = (0.2646 - 0.2016) / 16
#: NVMe flash, USD per GiB-hour: AWS EBS gp3 SSD at $0.08 per GiB-month (us-east-1), over a
#: 730-hour month.  Local NVMe has no list price of its own (it comes bundled with an instance).
NVME_USD_PER_GIB_HOUR = 0.08 / HOURS_PER_MONTH
#: A parallel file system, USD per GiB-hour: Amazon FSx for Lustre, persistent SSD at
#: 125 MB/s/TiB, $0.145 per GB-month (us-east-1; capacity is provisioned in GiB), over 730 hours.
DFS_USD_PER_GIB_HOUR = 0.145 / HOURS_PER_MONTH


def _amortised_usd_per_gib_hour(capex_usd: float, years: float, capacity_bytes: int) -> float:
    """Capital cost spread evenly over ``years`` of 8766 hours and over the capacity in GiB."""
    return capex_usd / (years * 8766) / (capacity_bytes / GIB)


_DRAM_PRICE = dict(usd_per_gib_hour=DRAM_USD_PER_GIB_HOUR,
                   price_source="AWS EC2 on-demand us-east-1: r7i.xlarge $0.2646/h (32 GiB) minus m7i.xlarge "
                                "$0.2016/h (16 GiB) = $0.063 per 16 GiB-hour")
_NVME_PRICE = dict(usd_per_gib_hour=NVME_USD_PER_GIB_HOUR,
                   price_source="AWS EBS gp3 SSD $0.08 per GiB-month (us-east-1) / 730 h; local NVMe has no "
                                "list price of its own")
#: ContextCube publishes no price: an assumed $300,000 box (26 U.2 NVMe drives, 4 BlueField-3 DPUs,
#: chassis) amortised over 4 years and over its 300 TB.
_LAYER35_PRICE = dict(usd_per_gib_hour=_amortised_usd_per_gib_hour(300_000, 4, 300 * TB),
                      price_source="assumed (no published price): a $300,000 appliance amortised over 4 years "
                                   "and 300 TB")

PRESETS: dict[str, TierSpec] = {
    "hbm": TierSpec("hbm", 141 * GB, 4.8 * TB, 4.8 * TB, 2e-6,
                    source="NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s; latency: kernel-launch scale (assumed)",
                    price_source="included in the GPU-hour (kvmm.sim.models.H200_USD_PER_GPU_HOUR)"),
    "dram": TierSpec("dram", 2 * TB, 55 * GB, 55 * GB, 10e-6,
                     source="host DRAM as seen from the GPU over PCIe 5.0 x16 (63 GB/s per direction raw, "
                            "~55 GB/s achieved by pinned-memory copies); 2 TB per node and 10 us per transfer (assumed)",
                     **_DRAM_PRICE),
    "cxl": TierSpec("cxl", 1 * TB, 32 * GB, 32 * GB, 2e-6,
                    source="CXL 2.0 Type-3 memory expander on a PCIe 5.0 x8 link (31.5 GB/s per direction raw); "
                           "load-to-use ~250 ns above local DRAM, plus DMA setup (assumed); the TempoKV paper stages "
                           "from an SSD-backed CXL memory device",
                    usd_per_gib_hour=DRAM_USD_PER_GIB_HOUR,
                    price_source="assumed: priced as host DRAM (an expander carries ordinary DDR5 DIMMs; no cloud "
                                 "list price)"),
    "nvme": TierSpec("nvme", 15 * TB, 14 * GB, 10 * GB, 80e-6, persistent=True,
                     source="local PCIe 5.0 enterprise NVMe SSD (e.g. Micron 9550: 14 GB/s sequential read, "
                            "10 GB/s write); ~80 us random-read access (typical TLC figure)",
                     **_NVME_PRICE),
    "layer3.5": TierSpec("layer3.5", 300 * TB, 120 * GB, 120 * GB, 30e-6, persistent=True, shared=True,
                         source="TuringData ContextCube shared KV appliance (Tech Week Singapore 2026): 120 GB/s KV "
                                "bandwidth per box, hundreds of TB shared and persistent (hours to weeks retention), "
                                "4 BlueField-3 DPUs with 2 x 200 Gb/s ports each, 26 U.2 NVMe drives, fetched over "
                                "RDMA; 30 us latency assumed",
                         **_LAYER35_PRICE),
    "dfs": TierSpec("dfs", 1000 * TB, 40 * GB, 40 * GB, 500e-6, persistent=True, shared=True,
                    source="Sugon ParaStor (F9000) as a Mooncake DFS backend: restart-recoverable, reclaims cold data in "
                           "whole segments, capacity grows with load; reported (SGLang, 64K context, 7 concurrent per "
                           "card): 16x throughput from KV offload, 80 % of a DRAM pool's throughput, TTFT under 10 s; "
                           "bandwidth and latency assumed",
                    usd_per_gib_hour=DFS_USD_PER_GIB_HOUR,
                    price_source="ParaStor publishes no price; priced as Amazon FSx for Lustre persistent SSD "
                                 "(125 MB/s/TiB) $0.145 per GB-month (us-east-1) / 730 h"),
    "supernode": TierSpec("supernode", 256 * TB, 400 * GB, 400 * GB, 5e-6, shared=True,
                          source="Huawei Ascend 950DT liquid-cooled 1024-card supernode (China Telecom Shanghai, 2026): "
                                 "256 TB global unified memory addressing, TB-class interconnect bandwidth "
                                 "(per-accelerator share of 400 GB/s and 5 us assumed)",
                          usd_per_gib_hour=DRAM_USD_PER_GIB_HOUR,
                          price_source="assumed: priced as host DRAM (no price published for supernode memory)"),
    "pooled-dram": TierSpec("pooled-dram", 32 * TB, 800 * GB, 800 * GB, 20e-6, shared=True,
                            source="MeshFusion (XSKY) / Mooncake Store: the DRAM of many nodes pooled into one KV "
                                   "store over end-to-end RDMA, with KV-cache-aware routing (TB to PB scale); "
                                   "assumed 16 nodes x 2 TB, each serving at 400 Gb/s (50 GB/s), 20 us per transfer",
                            **_DRAM_PRICE),
    "pooled-nvme": TierSpec("pooled-nvme", 240 * TB, 224 * GB, 160 * GB, 100e-6, persistent=True, shared=True,
                            source="MeshFusion (XSKY) / Mooncake Store: the NVMe SSDs of many nodes pooled over RDMA; "
                                   "assumed 16 nodes x 15 TB at 14 GB/s read / 10 GB/s write each (Micron 9550 class), "
                                   "80 us flash access + RDMA = 100 us per transfer",
                            **_NVME_PRICE),
}

#: The presets a cluster shares (``shared=True``): the Layer 3.5 appliance, the pooled DRAM and
#: NVMe stores, supernode unified memory and the DFS bottom tier.
SHARED_PRESETS: tuple[str, ...] = tuple(name for name, spec in PRESETS.items() if spec.shared)


def preset(name: str, capacity_bytes: int | None = None) -> TierSpec:
    """A preset by name, optionally resized."""
    if name not in PRESETS:
        raise BadInputError(f"unknown tier preset {name!r}; expected one of {sorted(PRESETS)}")
    spec = PRESETS[name]
    return spec if capacity_bytes is None else spec.with_capacity(capacity_bytes)


#: Links between serving instances (prefill -> decode KV hand-off; kvmm.sim PD disaggregation).
#: ``read_bandwidth`` = ``write_bandwidth`` = one direction's bandwidth; capacity is unused (0).
_LINK_PRICE = dict(price_source="assumed: included in the instances' price (usd_per_hour 0)")
LINK_PRESETS: dict[str, TierSpec] = {
    "nvlink": TierSpec("nvlink", 0, 450 * GB, 450 * GB, 2e-6,
                       source="NVIDIA H200 datasheet: NVLink 900 GB/s per GPU (both directions: 450 GB/s each way); "
                              "intra-node, 2 us per transfer assumed", **_LINK_PRICE),
    "supernode": TierSpec("supernode", 0, 350 * GB, 350 * GB, 1e-6,
                          source="supernode unified bus: Alibaba Zhenwu 810E PPU 700 GB/s chip-to-chip interconnect, "
                                 "128 cards in one unified-memory scale-up domain in the Zhenwu M890 supernode (Aug 2026); "
                                 "Huawei Ascend 950DT 1024-card supernode with 256 TB unified memory addressing (Sep 2026); "
                                 "'hundred-nanosecond chip P2P latency' (Lenovo WenTian supernode).  Half of 700 GB/s per "
                                 "direction and 1 us per transfer assumed", **_LINK_PRICE),
    "rdma200": TierSpec("rdma200", 0, 25 * GB, 25 * GB, 5e-6,
                        source="200 Gb/s RDMA port (e.g. BlueField-3 / ConnectX-7 HDR; the TuringData appliance uses "
                               "2 x 200 Gb/s per DPU): 25 GB/s nominal; 5 us per transfer assumed", **_LINK_PRICE),
    "rdma400": TierSpec("rdma400", 0, 50 * GB, 50 * GB, 5e-6,
                        source="400 Gb/s RDMA (ConnectX-7 NDR InfiniBand / RoCE): 50 GB/s nominal; 5 us assumed", **_LINK_PRICE),
    "cross-dc": TierSpec("cross-dc", 0, 12.5 * GB, 12.5 * GB, 20e-3,
                         source="cross-datacenter Ethernet as in Infinigence PDD (Prefill-RelayDecode-MainDecode), "
                                "validated over ~4000 km between Hami and Shenzhen with China Telecom (Aug 2026): "
                                "20 ms one way (light in fibre, ~5 us/km) and a 100 Gb/s path assumed (no bandwidth "
                                "published)", **_LINK_PRICE),
}


def link_preset(name: str) -> TierSpec:
    """A link preset by name (see :data:`LINK_PRESETS`)."""
    if name not in LINK_PRESETS:
        raise BadInputError(f"unknown link preset {name!r}; expected one of {sorted(LINK_PRESETS)}")
    return LINK_PRESETS[name]
