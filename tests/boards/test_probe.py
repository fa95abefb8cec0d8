"""The device probe's parser and cluster selection, on recorded outputs of three kinds of device."""

import pytest

from edgenlp.boards.probe import parse_probe


def probe_output(*, arch, cpuinfo, cpus, meminfo="MemTotal: 3884008 kB\nMemAvailable: 2048000 kB\n",
                 df="/dev/root 30000000 10000000 20480000 33% /tmp", tools="taskset", libc="glibc 2.36", android=""):
    return (f"@@uname\n{arch}\n6.1.0\n@@cpuinfo\n{cpuinfo}\n@@cpus\n{cpus}\n@@meminfo\n{meminfo}@@df\n{df}\n"
            f"@@tools\n{tools}\n@@libc\n{libc}\n@@android\n{android}\n@@end\n")


def arm_cpuinfo(parts):
    return "\n".join(f"processor\t: {i}\nBogoMIPS\t: 38.40\nFeatures\t: fp asimd aes sha2 asimddp\nCPU implementer\t: 0x41\n"
                     f"CPU part\t: {p}\n" for i, p in enumerate(parts))


PHONE = probe_output(  # 4x A55 @1.8 GHz + 3x A76 @2.4 GHz + 1x A76 @2.8 GHz (tri-cluster)
    arch="aarch64", cpuinfo=arm_cpuinfo(["0xd05"] * 4 + ["0xd0b"] * 4) + "\nHardware\t: Qualcomm SM7250",
    cpus="\n".join([f"{i} 1804800 schedutil" for i in range(4)] + [f"{i} 2400000 schedutil" for i in (4, 5, 6)] + ["7 2803200 performance"]),
    tools="taskset\nandroid", libc="", android="13\nPixel 5")


def test_phone_clusters_big_little_and_android():
    info = parse_probe(PHONE)
    assert info.arch == "aarch64" and info.os == "android" and info.cores == 8
    assert info.cpu_model == "4x Cortex-A55 + 4x Cortex-A76 (Qualcomm SM7250)"
    assert [c.cpus for c in info.clusters] == [(0, 1, 2, 3), (4, 5, 6), (7,)]
    assert [c.max_mhz for c in info.clusters] == [1804, 2400, 2803]
    assert info.cpus_for("little") == (0, 1, 2, 3)
    assert info.cpus_for("big") == (4, 5, 6, 7)  # every core above the slowest cluster
    assert info.cpus_for("all") == tuple(range(8))
    assert info.governors == ("schedutil", "performance")
    assert info.mem_total_mb == 3792 and info.mem_available_mb == 2000 and info.tmp_free_mb == 20000
    assert info.has_taskset and "asimddp" in info.isa and info.extra["product_model"] == "Pixel 5"


def test_board_without_cpufreq_clusters_by_core_type():
    out = probe_output(arch="aarch64", cpuinfo=arm_cpuinfo(["0xd03", "0xd03", "0xd08", "0xd08"]) + "\nModel\t: Some Board",
                       cpus="0 - -\n1 - -\n2 - -\n3 - -", tools="")
    info = parse_probe(out)
    assert info.cpu_model == "2x Cortex-A53 + 2x Cortex-A72 (Some Board)"
    assert sorted(c.cpus for c in info.clusters) == [(0, 1), (2, 3)]
    assert {c.core for c in info.clusters} == {"Cortex-A53", "Cortex-A72"}
    assert not info.has_taskset and info.governors == ()


def test_homogeneous_x86_host_is_one_cluster():
    out = probe_output(arch="x86_64", cpuinfo="processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: fpu avx2 fma\n"
                                              "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t: fpu avx2 fma\n", cpus="0 - -\n1 - -")
    info = parse_probe(out)
    assert info.cpu_model == "AMD EPYC" and info.isa == ("avx2", "fma") and len(info.clusters) == 1
    assert info.cpus_for("big") == info.cpus_for("little") == (0, 1)
    with pytest.raises(ValueError, match="cores"):
        info.cpus_for("medium")


def test_not_probe_output_is_refused():
    with pytest.raises(ValueError, match="probe"):
        parse_probe("Welcome to the board!\n")
