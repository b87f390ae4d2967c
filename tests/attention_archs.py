#!/usr/bin/env python3
"""Decode attention for every CUDA architecture kvtile lists (tests/build_checks.sh).

Compiles tests/attention_archs.cu once per architecture of
KVTILE_DEFAULT_CUDA_ARCHITECTURES (cmake/KvtileCuda.cmake) as that target's
SASS, with ptxas -v; prints registers and spills of every decode kernel that
has a body there (kernels of policies not compiled for a target are one-trap
stubs and are left out), runs the host part for each policy's shared memory,
and fails when a kernel spills more than tests/data/attention_spills.txt allows
for it (a kernel not listed: no spills allowed). --update rewrites that file
from this run.

Usage: tests/attention_archs.py [--nvcc PATH] [--jobs N] [--update] [--json FILE]
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT = os.path.join(ROOT, "tests", "attention_archs.cu")
ALLOW = os.path.join(ROOT, "tests", "data", "attention_spills.txt")


def listed_architectures():
    text = open(os.path.join(ROOT, "cmake", "KvtileCuda.cmake")).read()
    m = re.search(r'set\(KVTILE_DEFAULT_CUDA_ARCHITECTURES\s+"([^"]+)"\)', text)
    if not m:
        sys.exit("attention_archs: KVTILE_DEFAULT_CUDA_ARCHITECTURES not found in cmake/KvtileCuda.cmake")
    # CMake syntax: 90a-real, 80-virtual; SASS targets only (virtual ones are PTX of a listed real one)
    return [a.split("-")[0] for a in m.group(1).split(";") if not a.endswith("-virtual")]


def short_name(mangled):
    try:
        name = subprocess.run(["c++filt", mangled], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        name = mangled
    name = re.sub(r"kvtile::v\d+_\d+::", "", name)
    name = re.sub(r"attention::(detail::)?", "", name)
    name = re.sub(r"\(.*\)$", "", name)
    name = re.sub(r"^void ", "", name)
    return name.replace(" ", "")


def compile_arch(nvcc, arch, work):
    log = os.path.join(work, f"sm_{arch}.log")
    cmd = [nvcc, "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-I", os.path.join(ROOT, "include"),
           f"-gencode=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v", "-o",
           os.path.join(work, f"attention_archs_{arch}"), UNIT]
    r = subprocess.run(cmd, capture_output=True, text=True)
    open(log, "w").write(r.stdout + r.stderr)
    return arch, r.returncode, r.stdout + r.stderr


def parse(text):
    """[(kernel, registers, spill stores, spill loads)] of the decode kernels with a body."""
    out, cur, spill = [], None, (0, 0)
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur, spill = m.group(1), (0, 0)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            spill = (int(m.group(1)), int(m.group(2)))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            regs = int(m.group(1))
            name = short_name(cur)
            if "decode_kernel" in name and regs > 16:  # the trap stubs use a handful of registers
                out.append((name, regs, spill[0], spill[1]))
            cur = None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")))
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--json", help="also write the kernel rows and the policy table as JSON")
    args = ap.parse_args()
    if not os.access(args.nvcc, os.X_OK):
        print("attention_archs: SKIP (nvcc not found)")
        return 0
    allow = {}
    if os.path.exists(ALLOW):
        for line in open(ALLOW):
            line = line.split("#", 1)[0].split()
            if len(line) == 3:
                allow[(line[0], line[1])] = int(line[2])
    archs = listed_architectures()
    fail = False
    rows, new_allow = [], []
    with tempfile.TemporaryDirectory() as work:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            results = list(ex.map(lambda a: compile_arch(args.nvcc, a, work), archs))
        for arch, rc, text in results:
            if rc != 0:
                print(text[-3000:])
                print(f"attention_archs: FAIL sm_{arch}: the decode kernels do not compile")
                fail = True
                continue
            kernels = parse(text)
            if not kernels:
                print(f"attention_archs: FAIL sm_{arch}: no decode kernel with a body (no policy for this target)")
                fail = True
            for name, regs, st, ld in kernels:
                limit = allow.get((arch, name), 0)
                bad = st > limit
                fail |= bad
                rows.append((arch, name, regs, st, ld, limit, bad))
                new_allow.append((arch, name, st))
        host = os.path.join(work, f"attention_archs_{archs[0]}") if archs else None
        policy_table = ""
        if host and os.path.exists(host):
            r = subprocess.run([host], capture_output=True, text=True)
            policy_table = r.stdout if r.returncode == 0 else f"(host part failed: {r.returncode})\n"
    print(f"{'arch':>5} {'regs':>4} {'spill st/ld':>11} {'allowed':>7}  kernel")
    for arch, name, regs, st, ld, limit, bad in rows:
        print(f"{arch:>5} {regs:>4} {st:>5}/{ld:<5} {limit:>7}  {name}{'  <-- MORE SPILLS THAN ALLOWED' if bad else ''}")
    print(policy_table, end="")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"nvcc": subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout.strip()
                       .splitlines()[-1],
                       "architectures": archs,
                       "kernels": [{"arch": a, "kernel": n, "registers": r, "spill_stores": st, "spill_loads": ld,
                                    "allowed_spill_stores": lim} for a, n, r, st, ld, lim, _ in rows],
                       "policy_table": policy_table.splitlines()}, f, indent=1)
    if args.update:
        with open(ALLOW, "w") as f:
            f.write("# Spill stores (bytes) each decode kernel may have per architecture (tests/attention_archs.py;\n"
                    "# --update rewrites it). A kernel that spills more, or spills and is not listed, fails CI.\n")
            for arch, name, st in new_allow:
                if st > 0:
                    f.write(f"{arch} {name} {st}\n")
        print(f"attention_archs: wrote {os.path.relpath(ALLOW, ROOT)}")
        return 0
    print("attention_archs: " + ("FAIL" if fail else f"ok ({len(archs)} architectures: {' '.join(archs)})"))
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
