"""edgetorch.runtime.host: the CPU model and the extensions kernels care about, from /proc/cpuinfo's fields."""

from __future__ import annotations

from edgetorch.runtime.host import host, host_from, read_cpuinfo

XEON = {
    "model name": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
    "flags": "fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx_vnni amx_tile amx_int8 amx_bf16",
}
GRAVITON = {"CPU implementer": "0x41", "Features": "fp asimd evtstrm aes crc32 asimddp sve i8mm bf16"}


def test_an_avx512_xeon():
    h = host_from(XEON)
    assert h.model.startswith("Intel(R) Xeon(R) Platinum 8481C")
    assert h.vector_bits == 512 and h.int8_dot == "avx512_vnni"
    assert h.isa[-3:] == ("amx_tile", "amx_int8", "amx_bf16") and "fpu" not in h.isa
    assert " " not in h.key() and h.key().endswith("amx_bf16")
    assert "avx512_vnni" in h.describe()


def test_an_arm_server_and_a_bare_machine():
    arm = host_from(GRAVITON)
    assert arm.vector_bits == 128 and arm.int8_dot == "asimddp" and {"sve", "i8mm"} <= set(arm.isa)
    bare = host_from({})
    assert bare.vector_bits == 128 and bare.int8_dot is None and bare.model  # falls back to the platform


def test_this_machine_and_a_missing_cpuinfo(tmp_path):
    assert host().cores >= 1 and host().model
    assert read_cpuinfo(str(tmp_path / "absent")) == {}
    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nmodel name\t: A\nflags\t\t: avx2\n\nprocessor\t: 1\nmodel name\t: B\n"
    )
    assert read_cpuinfo(str(tmp_path / "cpuinfo")) == {"processor": "0", "model name": "A", "flags": "avx2"}
