#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run a command under a seccomp profile in the container runtimes' JSON
format, as a container runtime would load it: seccomp-exec.py PROFILE
[--refuse NAME,...] -- COMMAND ARGS...

Only what deploy/kubernetes/seccomp-kvtierd.json uses is understood: the
default action SCMP_ACT_ERRNO, entries that allow or fail with an errno,
and argument conditions SCMP_CMP_EQ and SCMP_CMP_MASKED_EQ; names this
architecture does not have are skipped, as runtimes skip them.  --refuse
takes names out of every entry, so that they fail with the default errno
(a runtime's default profile that lacks them).  x86_64 only: exits 77
elsewhere.  The command keeps this process's pid (the filter is installed,
then the command executed).
"""
import ctypes
import json
import os
import platform
import re
import sys

AUDIT_ARCH_X86_64 = 0xC000003E
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
AND_K = 0x54
RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def syscall_numbers():
    for path in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
        try:
            text = open(path).read()
        except OSError:
            continue
        return {m.group(1): int(m.group(2))
                for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)", text)}
    sys.exit("seccomp-exec: no asm/unistd_64.h to number the system calls by")


def ins(code, k, jt=0, jf=0):
    return (code, jt, jf, k & 0xFFFFFFFF)


def action(entry, default_errno):
    a = entry["action"]
    if a == "SCMP_ACT_ALLOW":
        return RET_ALLOW
    if a == "SCMP_ACT_ERRNO":
        return RET_ERRNO | entry.get("errnoRet", default_errno)
    raise SystemExit("seccomp-exec: action %s not understood" % a)


def conditions(args):
    """The checks of an entry, each jumping to 'fail' (None) when unmet."""
    out = []
    for a in args:
        off = 16 + 8 * a["index"]
        if a["op"] == "SCMP_CMP_EQ":
            mask, value = 0xFFFFFFFFFFFFFFFF, a["value"]
        elif a["op"] == "SCMP_CMP_MASKED_EQ":
            mask, value = a["value"], a.get("valueTwo", 0)
        else:
            raise SystemExit("seccomp-exec: op %s not understood" % a["op"])
        for half, shift in ((0, 0), (4, 32)):
            out.append(ins(LD_W_ABS, off + half))
            out.append(ins(AND_K, (mask >> shift) & 0xFFFFFFFF))
            out.append(("jeq-fail", (value >> shift) & 0xFFFFFFFF))
    return out


def program(profile, refused):
    if profile["defaultAction"] != "SCMP_ACT_ERRNO":
        raise SystemExit("seccomp-exec: default action %s not understood" % profile["defaultAction"])
    default_errno = profile.get("defaultErrnoRet", 1)
    default = ins(RET_K, RET_ERRNO | default_errno)
    numbers = syscall_numbers()
    prog = [ins(LD_W_ABS, 4), ins(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), default,
            ins(LD_W_ABS, 0), ins(JGE_K, 0x40000000, 0, 1), default]
    for entry in profile["syscalls"]:
        ret = ins(RET_K, action(entry, default_errno))
        checks = conditions(entry.get("args") or [])
        for name in entry["names"]:
            if name in refused or name not in numbers:
                continue
            body = checks + [ret]
            # Jumps to the end of the block (the next entry) when unmet.
            block = []
            for i, c in enumerate(body):
                if c[0] == "jeq-fail":
                    block.append(ins(JEQ_K, c[1], 0, len(body) - i - 1))
                else:
                    block.append(c)
            prog.append(ins(LD_W_ABS, 0))
            prog.append(ins(JEQ_K, numbers[name], 0, len(block)))
            prog.extend(block)
    prog.append(default)
    if len(prog) > 4096:
        raise SystemExit("seccomp-exec: %d instructions, more than a filter may have" % len(prog))
    return prog


def main():
    if "--" not in sys.argv or len(sys.argv) < 4:
        sys.exit(__doc__)
    sep = sys.argv.index("--")
    opts, cmd = sys.argv[1:sep], sys.argv[sep + 1:]
    if platform.machine() != "x86_64":
        print("seccomp-exec: x86_64 only")
        sys.exit(77)
    refused = set()
    if "--refuse" in opts:
        i = opts.index("--refuse")
        refused = set(opts[i + 1].split(","))
        del opts[i:i + 2]
    profile = json.load(open(opts[0]))
    prog = program(profile, refused)

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*[SockFilter(*p) for p in prog])
    fprog = SockFprog(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
       libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog)) != 0:
        print("seccomp-exec: cannot install a filter: %s" % os.strerror(ctypes.get_errno()))
        sys.exit(77)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
