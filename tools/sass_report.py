#!/usr/bin/env python3
"""Per kernel of a CUDA source: its SASS size and what its instructions touch (issue 5: "SASS:
16-byte accesses, no local-memory spills, the instructions you meant"). No GPU needed: nvcc
compiles the file for sm_90 into a cubin, nvdisasm (the toolkit's, or NVDISASM=path, e.g. from the
nvidia-cuda-nvdisasm wheel) prints it.

    tools/sass_report.py src/cuda/lean.cu [FILTER]     # FILTER: a substring of the kernel's name

One line per kernel entry: the bytes of its body (the code before its first out-of-line function:
what a launch can run, cold paths included), the bytes of its out-of-line functions, local-memory
instructions (LDL/STL: spills, or a local array) in the body and in the functions, the copy loops
(a backward branch's span of at most 400 instructions that holds 16-byte global accesses: the
datapath's hot loops) and the local-memory instructions inside them (there, a spill costs every
iteration), global or generic loads and stores by width, and barriers. Sizes matter for small calls: a launch whose SM
does not hold the kernel's code fetches it from L2 (docs/tuning.md, finding 23).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEM = re.compile(r"\b(LDG|STG|LD|ST|LDL|STL)((?:\.[A-Z0-9_]+)*)\s")


def disasm(src):
    nvcc = os.environ.get("NVCC", "nvcc")
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        sys.exit("sass_report: no nvdisasm (set NVDISASM=path)")
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "k.cubin")
        subprocess.run([nvcc, "-O2", "-cubin", "-arch=sm_90", "--fmad=false", "-DPURLIN_BUILD=1",
                        "-DPURLIN_HAVE_CUDA=1", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "include"),
                        "-I" + os.path.join(ROOT, "src"), "-I" + os.path.join(ROOT, "bench"), src,
                        "-o", cubin], check=True)
        return subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True,
                              text=True).stdout


def kernels(sass):
    """(mangled name, [body lines], [function lines]) per .text section."""
    out, name, body, fun, in_fun = [], None, [], [], False
    for line in sass.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.(\S+?),", line)
        if m:
            if name:
                out.append((name, body, fun))
            name, body, fun, in_fun = m.group(1), [], [], False
            continue
        if name is None:
            continue
        if re.match(r"\s*\.type\s+\$", line):
            in_fun = True
        if re.search(r"/\*[0-9a-f]{4,}\*/", line) or re.match(r"\s*\.L_x_\d+:", line):
            (fun if in_fun else body).append(line)  # (labels too: copy_loops finds loops by them)
    if name:
        out.append((name, body, fun))
    return out


def is_insn(line):
    return re.search(r"/\*[0-9a-f]{4,}\*/", line) is not None


def copy_loops(lines):
    """(loops, local-memory instructions in them): the spans from a label to a later branch back to
    it, of at most 400 instructions, that hold a 16-byte global load or store."""
    at, n, loc = {}, 0, 0
    for i, line in enumerate(lines):
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            at[m.group(1)] = i
            continue
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", line)
        if not m or m.group(1) not in at:
            continue
        seg = [x for x in lines[at[m.group(1)]:i + 1] if is_insn(x)]
        if len(seg) <= 400 and any(re.search(r"\b(LDG|STG)(\.\w+)*\.128\b", x) for x in seg):
            n += 1
            loc += sum(1 for x in seg if re.search(r"\b(LDL|STL)\b", x))
    return n, loc


def width(mods):
    for w in ("128", "64", "U8", "S8", "U16", "S16"):
        if "." + w in mods:
            return w
    return "32"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src, filt = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    ks = kernels(disasm(src))
    names = subprocess.run(["c++filt"], input="\n".join(k[0] for k in ks), capture_output=True,
                           text=True).stdout.splitlines() if shutil.which("c++filt") else \
        [k[0] for k in ks]
    print("%-40s %7s %7s %9s %11s  %s" % ("kernel", "body KB", "fn KB", "LDL/STL", "loops/LDL+STL",
                                          "global/generic accesses by width (body), barriers"))
    for (mangled, body, fun), name in zip(ks, names):
        if filt not in name:
            continue
        nl, ll = copy_loops(body + fun)
        body, fun = [l for l in body if is_insn(l)], [l for l in fun if is_insn(l)]
        loc_b = sum(1 for l in body if re.search(r"\b(LDL|STL)\b", l))
        loc_f = sum(1 for l in fun if re.search(r"\b(LDL|STL)\b", l))
        acc = {}
        for l in body:
            m = MEM.search(l)
            if m and m.group(1) not in ("LDL", "STL"):
                k = m.group(1)[:2] + "." + width(m.group(2))
                acc[k] = acc.get(k, 0) + 1
        bars = sum(1 for l in body if "BAR.SYNC" in l)
        print("%-40s %7.1f %7.1f %4d/%-4d %5d/%-5d  %s, %d BAR" % (
            name[:40], len(body) * 16 / 1024, len(fun) * 16 / 1024, loc_b, loc_f, nl, ll,
            " ".join("%s:%d" % kv for kv in sorted(acc.items())), bars))


if __name__ == "__main__":
    main()
