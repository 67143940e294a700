#!/usr/bin/env python3
"""Checks that a GPU plugin carries device code for every listed target.

    check_fatbin.py cuda LIB --archs 80;86;...   SASS per arch + PTX for the newest
    check_fatbin.py hip  LIB --targets gfx908;... one AMDGPU code object per target
    add --list to print what was found

The CUDA toolkit here has no cuobjdump, so this reads the containers
itself (python3 standard library only):

CUDA: the `.nv_fatbin` ELF section holds one fat binary per translation
unit, each 8-byte aligned: a 16-byte header (u32 magic 0xBA55ED50, u16
version, u16 header size, u64 size of the entries), then entries, each
with a header (u16 kind: 1 = PTX, 2 = ELF/SASS; u16 version; u32 header
size; u64 payload size; u32 compressed size (0: stored plain); u32;
u16 minor; u16 major; u32 sm arch; ...) followed by its payload. Plain
SASS payloads must be CUDA ELF files (e_machine 190). nvcc 13 stores SASS
plain and compresses PTX.

HIP: the `.hip_fatbin` section holds clang offload bundles: the 24-byte
magic "__CLANG_OFFLOAD_BUNDLE__", u64 entry count, then per entry u64
offset (from the bundle start), u64 size, u64 id length and the id, e.g.
"hipv4-amdgcn-amd-amdhsa--gfx90a". Each code object must be an AMDGPU ELF
(e_machine 224) whose e_flags name the same processor.
"""
import argparse
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
KIND_PTX, KIND_SASS = 1, 2
EM_AMDGPU = 224
EM_CUDA = 190
EF_AMDGPU_MACH = 0xFF
# EF_AMDGPU_MACH_AMDGCN_* values (LLVM AMDGPUUsage, "AMDGPU ELF Header").
AMDGPU_MACH = {
    "gfx900": 0x02C, "gfx902": 0x02D, "gfx904": 0x02E, "gfx906": 0x02F, "gfx908": 0x030,
    "gfx909": 0x031, "gfx90c": 0x032, "gfx1010": 0x033, "gfx1011": 0x034, "gfx1012": 0x035,
    "gfx1030": 0x036, "gfx1031": 0x037, "gfx1032": 0x038, "gfx1033": 0x039, "gfx90a": 0x03F,
}


class Bad(Exception):
    pass


def elf_sections(data):
    """{name: bytes} of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise Bad("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(shnum):
        base = shoff + i * shentsize
        name, kind, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, base)
        headers.append((name, kind, offset, size))
    _, _, str_off, str_size = headers[shstrndx]
    names = data[str_off:str_off + str_size]
    out = {}
    for name, kind, offset, size in headers:
        label = names[name:names.index(b"\0", name)].decode()
        out[label] = b"" if kind == 8 else data[offset:offset + size]  # SHT_NOBITS has no bytes
    return out


def is_cuda_elf(blob):
    return blob[:4] == b"\x7fELF" and struct.unpack_from("<H", blob, 0x12)[0] == EM_CUDA


def cuda_entries(section):
    """(kind, arch) of every entry of every fat binary in the section."""
    entries, pos = [], 0
    while pos + 16 <= len(section):
        magic, = struct.unpack_from("<I", section, pos)
        if magic != FATBIN_MAGIC:
            if any(section[pos:pos + 8]):
                raise Bad(f"no fat binary magic at .nv_fatbin offset {pos:#x}")
            pos += 8  # alignment padding between fat binaries
            continue
        _version, header_size, fat_size = struct.unpack_from("<HHQ", section, pos + 4)
        entry, end = pos + header_size, pos + header_size + fat_size
        if end > len(section):
            raise Bad(f"fat binary at {pos:#x} runs past the section")
        while entry < end:
            kind, _ver, entry_header, payload = struct.unpack_from("<HHIQ", section, entry)
            compressed, = struct.unpack_from("<I", section, entry + 16)
            arch, = struct.unpack_from("<I", section, entry + 28)
            if entry_header < 32 or entry + entry_header + payload > end:
                raise Bad(f"malformed fat binary entry at {entry:#x}")
            body = section[entry + entry_header:entry + entry_header + payload]
            if kind == KIND_SASS and compressed == 0 and not is_cuda_elf(body):
                raise Bad(f"SASS entry for sm_{arch} at {entry:#x} is not a CUDA ELF")
            entries.append((kind, arch))
            entry += entry_header + payload
        pos = (end + 7) & ~7
    return entries


def check_cuda(data, archs):
    sections = elf_sections(data)
    if ".nv_fatbin" not in sections:
        raise Bad("no .nv_fatbin section: the library carries no CUDA device code")
    entries = cuda_entries(sections[".nv_fatbin"])
    if not entries:
        raise Bad(".nv_fatbin holds no entries")
    sass = {arch for kind, arch in entries if kind == KIND_SASS}
    ptx = {arch for kind, arch in entries if kind == KIND_PTX}
    problems = [f"no SASS for sm_{a}" for a in archs if a not in sass]
    newest = max(archs)
    if newest not in ptx:
        problems.append(f"no PTX for compute_{newest} (forward compatibility)")
    found = sorted({f"sm_{a}" for a in sass} | {f"compute_{a}(ptx)" for a in ptx})
    return problems, found


def hip_entries(section):
    """(id, code object bytes) of every bundle in the section."""
    entries, pos = [], 0
    while True:
        pos = section.find(BUNDLE_MAGIC, pos)
        if pos < 0:
            return entries
        count, = struct.unpack_from("<Q", section, pos + len(BUNDLE_MAGIC))
        cursor = pos + len(BUNDLE_MAGIC) + 8
        end = pos
        for _ in range(count):
            offset, size, id_len = struct.unpack_from("<QQQ", section, cursor)
            cursor += 24
            ident = section[cursor:cursor + id_len].decode()
            cursor += id_len
            if pos + offset + size > len(section):
                raise Bad(f"bundle entry {ident} runs past the section")
            entries.append((ident, section[pos + offset:pos + offset + size]))
            end = max(end, pos + offset + size)
        pos = max(cursor, end)


def check_hip(data, targets):
    sections = elf_sections(data)
    if ".hip_fatbin" not in sections:
        raise Bad("no .hip_fatbin section: the library carries no HIP device code")
    entries = hip_entries(sections[".hip_fatbin"])
    if not entries:
        raise Bad(".hip_fatbin holds no offload bundle")
    problems, found = [], []
    code_objects = {}
    for ident, blob in entries:
        if not ident.startswith(("hipv4-amdgcn-amd-amdhsa-", "hip-amdgcn-amd-amdhsa-")):
            continue  # the (empty) host entry
        target = ident.rsplit("-", 1)[-1].split(":")[0]
        code_objects[target] = blob
        found.append(ident)
    for target in targets:
        blob = code_objects.get(target)
        if blob is None:
            problems.append(f"no code object for {target}")
            continue
        if blob[:4] != b"\x7fELF":
            problems.append(f"{target}: the bundle entry is not an ELF code object")
            continue
        machine, = struct.unpack_from("<H", blob, 0x12)
        flags, = struct.unpack_from("<I", blob, 0x30)
        if machine != EM_AMDGPU:
            problems.append(f"{target}: e_machine {machine}, not EM_AMDGPU")
        elif target in AMDGPU_MACH and flags & EF_AMDGPU_MACH != AMDGPU_MACH[target]:
            problems.append(f"{target}: e_flags name processor {flags & EF_AMDGPU_MACH:#x}, not {AMDGPU_MACH[target]:#x}")
    return problems, sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vendor", choices=["cuda", "hip"])
    parser.add_argument("library")
    parser.add_argument("--archs", default="", help="CUDA sm numbers, ';' or ',' separated")
    parser.add_argument("--targets", default="", help="HIP gfx targets, ';' or ',' separated")
    parser.add_argument("--list", action="store_true", help="print every device code entry found")
    args = parser.parse_args()

    def split(text):
        return [t for t in text.replace(",", ";").split(";") if t]

    try:
        with open(args.library, "rb") as f:
            data = f.read()
        if args.vendor == "cuda":
            wanted = [int(a.split("-")[0]) for a in split(args.archs)]
            if not wanted:
                raise Bad("--archs is empty")
            problems, found = check_cuda(data, wanted)
        else:
            wanted = split(args.targets)
            if not wanted:
                raise Bad("--targets is empty")
            problems, found = check_hip(data, wanted)
    except (Bad, OSError, struct.error, UnicodeDecodeError, ValueError) as e:
        print(f"check_fatbin: {args.library}: {e}", file=sys.stderr)
        return 1
    if args.list or problems:
        print(f"{args.library}: found " + ", ".join(found))
    for p in problems:
        print(f"check_fatbin: {args.library}: {p}", file=sys.stderr)
    if not problems:
        print(f"check_fatbin: {args.vendor}: device code for every listed target ({', '.join(map(str, wanted))})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
