# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpulab.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a llama.cpp build's BUILD_INFO.json says, read by the build roles and the servers alike: the
file checked, the lockstep summary a worker's servers.json carries, and the one lockstep rule (who
may serve beside whom). Pure functions on text and dicts; the build planning is in llama_cpp.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpulab.inference.plugins.module_utils.cuda import major_minor

BUILD_ID_LENGTH = 12
BUILD_ID_PATTERN = re.compile(r"\A[0-9a-f]{%d}\Z" % BUILD_ID_LENGTH)

BUILD_INFO_REQUIRED_KEYS = (
    "build_id",
    "source",
    "cmake_options",
    "cuda",
    "cuda_architectures",
    "nvcc_version",
    "compiler",
    "cpu_arch",
    "glibc_version",
    "rpc_server_binary",
    "binaries",
)


class LlamaCppError(ValueError):
    """Bad input: the message names the offending value and what to do."""


def version_tuple(version):
    """'2.36' -> (2, 36); None or garbage -> ()."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", str(version or "")))


LOCKSTEP_FIELDS = ("build_id", "source", "cpu_arch", "glibc_version", "cuda", "nvcc_version")


FILE_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.+-]{0,254}\Z")
SHA256_PATTERN = re.compile(r"\A[0-9a-f]{64}\Z")
VERSION_PATTERN = re.compile(r"\A[0-9]{1,6}(?:\.[0-9]{1,6}){0,3}\Z")
CPU_ARCH_PATTERN = re.compile(r"\A[A-Za-z0-9_]{1,32}\Z")
# A source id names a git URL and commit or an archive digest: printable, no space or newline.
SOURCE_ID_PATTERN = re.compile(r"\A[!-~]{1,512}\Z")


def check_lockstep_summary(summary, where):
    """Check the fields lockstep_problem reads, each for its type and shape (None allowed but for
    build_id), so a worker's servers.json or a BUILD_INFO.json cannot end in a TypeError or put
    odd text in a message. where names the file in errors; returns summary."""
    def fail(field, expected):
        raise LlamaCppError("%s: %s is %r, expected %s; rebuild or redeploy that build"
                            % (where, field, summary.get(field), expected))

    if not isinstance(summary, dict):
        raise LlamaCppError("%s: the build summary is %r, expected an object" % (where, summary))
    build = summary.get("build_id")
    if not isinstance(build, str) or not BUILD_ID_PATTERN.match(build):
        fail("build_id", "a %d-digit hex build id" % BUILD_ID_LENGTH)
    source = summary.get("source")
    if source is not None:
        if not isinstance(source, dict):
            fail("source", "an object with an id")
        if source.get("id") is not None and not (isinstance(source["id"], str) and SOURCE_ID_PATTERN.match(source["id"])):
            raise LlamaCppError("%s: source id is %r, expected a commit or archive id; rebuild or redeploy that build"
                                % (where, source.get("id")))
    for field, pattern, expected in (("cpu_arch", CPU_ARCH_PATTERN, "a CPU architecture such as x86_64"),
                                     ("glibc_version", VERSION_PATTERN, "a version such as 2.36"),
                                     ("nvcc_version", VERSION_PATTERN, "a version such as 12.8.93 or null")):
        value = summary.get(field)
        if value is not None and not (isinstance(value, str) and pattern.match(value)):
            fail(field, expected)
    if summary.get("cuda") is not None and not isinstance(summary.get("cuda"), bool):
        fail("cuda", "true or false")
    return summary


def lockstep_summary(build_info):
    """The part of a BUILD_INFO.json that lockstep_problem reads, for a worker's manifest (servers.json)."""
    return dict((key, build_info.get(key)) for key in LOCKSTEP_FIELDS)


# --- BUILD_INFO.json ---------------------------------------------------------

def parse_build_info(text):
    """Load and check a BUILD_INFO.json (text or bytes); raises LlamaCppError naming what is wrong."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LlamaCppError("BUILD_INFO.json is not UTF-8 (byte %d): rebuild or remove that build" % exc.start)
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise LlamaCppError("BUILD_INFO.json is not valid JSON: %s" % exc)
    if not isinstance(info, dict):
        raise LlamaCppError("BUILD_INFO.json must hold a JSON object")
    missing = [key for key in BUILD_INFO_REQUIRED_KEYS if key not in info]
    if missing:
        raise LlamaCppError("BUILD_INFO.json lacks %s" % ", ".join(missing))
    if not isinstance(info["build_id"], str) or not BUILD_ID_PATTERN.match(info["build_id"]):
        raise LlamaCppError("BUILD_INFO.json build_id %r is not a %d-digit hex id"
                            % (info["build_id"], BUILD_ID_LENGTH))
    if not isinstance(info["binaries"], dict) or not info["binaries"]:
        raise LlamaCppError("BUILD_INFO.json binaries must map each binary to its sha256")
    for name, digest in info["binaries"].items():
        # The names become paths under bin/: a plain file name, never ../ or a newline.
        if not FILE_NAME_PATTERN.match(name):
            raise LlamaCppError("BUILD_INFO.json binaries has the name %r, which is not a plain file name; rebuild "
                                "that build" % (name,))
        if not isinstance(digest, str) or not SHA256_PATTERN.match(digest):
            raise LlamaCppError("BUILD_INFO.json binaries %s has the checksum %r, not a sha256 (64 hex digits); rebuild "
                                "that build" % (name, digest))
    check_lockstep_summary(info, "BUILD_INFO.json")
    return info


def checksum_mismatches(expected, actual):
    """Names of binaries whose sha256 differs from BUILD_INFO (or that are missing)."""
    return sorted(name for name, digest in expected.items() if actual.get(name) != digest)


def _cuda_major(version):
    parsed = major_minor(version)
    return parsed[0] if parsed else None


def sharing_problems(build, node):
    """Why a node cannot run binaries built on another host at all ([] = it can share them).

    The only reasons to build locally: another CPU architecture, an older glibc (static
    binaries still load the host's libc) and, for a CUDA build, a driver whose CUDA major is
    older than the toolkit's (CUDA's minor-version compatibility ends at the major).
    build: {'cpu_arch', 'glibc_version', 'cuda', 'nvcc_version'} (a BUILD_INFO.json or the build
    host's toolchain); node: {'cpu_arch', 'glibc_version', 'driver_cuda_version'}.
    """
    problems = []
    if node.get("cpu_arch") != build.get("cpu_arch"):
        problems.append("cpu arch %s differs from the build's %s" % (node.get("cpu_arch"), build.get("cpu_arch")))
    node_glibc = version_tuple(node.get("glibc_version"))
    if not node_glibc or node_glibc < version_tuple(build.get("glibc_version")):
        problems.append("glibc %s is older than the build host's %s"
                        % (node.get("glibc_version"), build.get("glibc_version")))
    if build.get("cuda"):
        toolkit_major = _cuda_major(build.get("nvcc_version"))
        driver_major = _cuda_major(node.get("driver_cuda_version"))
        if driver_major is not None and toolkit_major is not None and driver_major < toolkit_major:
            problems.append("its driver supports CUDA %s, an older major than the build's toolkit %s"
                            % (node.get("driver_cuda_version"), build.get("nvcc_version")))
    return problems


def lockstep_problem(reference, node_build, host="this node"):
    """The one lockstep rule for distribution and the head: None when the node's build may serve
    beside the reference build, else why not.

    reference / node_build: BUILD_INFO.json contents (or at least build_id, source, cpu_arch,
    glibc_version, cuda, nvcc_version). The same id always passes. Another id passes only for a
    local build that had to be (sharing_problems of the node's platform against the reference
    build) from the same source, since ggml RPC needs the same protocol on both ends.
    """
    if not node_build or not node_build.get("build_id"):
        return "%s has no valid llama.cpp build (expected %s)" % (host, reference.get("build_id"))
    if node_build.get("build_id") == reference.get("build_id"):
        return None
    ref_source = (reference.get("source") or {}).get("id")
    node_source = (node_build.get("source") or {}).get("id")
    if ref_source != node_source:
        return ("%s runs llama.cpp build %s from source %s, the cluster's build %s is from %s: "
                "ggml RPC needs the same source on every node; run playbooks/build.yml"
                % (host, node_build.get("build_id"), node_source, reference.get("build_id"), ref_source))
    platform = {
        "cpu_arch": node_build.get("cpu_arch"),
        "glibc_version": node_build.get("glibc_version"),
        # A local build's toolkit is one its own driver runs: its major stands for the driver's.
        "driver_cuda_version": node_build.get("nvcc_version") if node_build.get("cuda") else None,
    }
    if not sharing_problems(reference, platform) and not (reference.get("cuda") and not node_build.get("cuda")):
        return ("%s runs llama.cpp build %s but could run the cluster's build %s (same CPU architecture, "
                "glibc and CUDA major): run playbooks/build.yml so every node gets build %s"
                % (host, node_build.get("build_id"), reference.get("build_id"), reference.get("build_id")))
    return None
