"""The machine facts the --numa-binding tests make up or read: NVIDIA GPUs
on chosen NUMA nodes under a fake DTRUN_SYSTEM_ROOT, and Linux CPU lists."""

from pathlib import Path


def cpu_set(text: str) -> set[int]:
    """The CPUs of a Linux CPU list such as "0-3,8"."""
    cpus = set()
    for item in text.strip().split(","):
        if item:
            lo, _, hi = item.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def fake_gpus(root: Path, numa_nodes: list[int]) -> None:
    """One NVIDIA GPU per entry, on that NUMA node, in PCI order, as the
    driver's /proc and /sys files under root (DTRUN_SYSTEM_ROOT)."""
    for i, node in enumerate(numa_nodes):
        address = f"0000:{0x10 + i:02x}:00.0"
        info = root / "proc/driver/nvidia/gpus" / address / "information"
        info.parent.mkdir(parents=True)
        info.write_text(f"Model: \t\t Fake\nGPU UUID: \t GPU-{i:04x}aaaa-0000\n")
        pci = root / "sys/bus/pci/devices" / address
        pci.mkdir(parents=True)
        pci.joinpath("numa_node").write_text(f"{node}\n")
