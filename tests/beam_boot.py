"""A stand-in for the Beam SDK container's boot program, for the portable replay test.

A Beam worker pool runs its ``--container_executable`` once per SDK worker with the endpoints the
runner gave (``--id``, ``--provision_endpoint``, ``--artifact_endpoint``, ``--control_endpoint``,
``--logging_endpoint``). In Beam's Python SDK image that is ``/opt/apache/beam/boot``: it asks the
provision service for the job's options and dependencies, fetches the artifacts the job staged,
installs the packages named in ``extra_packages.txt`` and starts the SDK harness. This script does
the same, with the one difference a test needs: the packages are installed offline and without
their dependencies (``pip install --no-deps --no-index --target``), into a folder put first on the
worker's ``PYTHONPATH``, so the worker imports wirepipe from the staged wheel and nothing else.

It works in a new folder under ``BOOT_DIR`` (else the system's temporary folder) and writes what it
did to ``BOOT_LOG`` (both environment variables the test sets): the staged file names, and the file
the worker's ``import wirepipe`` resolves to.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    import grpc
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import (
        beam_artifact_api_pb2,
        beam_artifact_api_pb2_grpc,
        beam_provision_api_pb2,
        beam_provision_api_pb2_grpc,
        beam_runner_api_pb2,
        endpoints_pb2,
    )
    from google.protobuf import json_format, text_format

    parser = argparse.ArgumentParser()
    for name in ("id", "logging_endpoint", "artifact_endpoint", "provision_endpoint", "control_endpoint"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()

    provision = beam_provision_api_pb2_grpc.ProvisionServiceStub(grpc.insecure_channel(args.provision_endpoint))
    info = provision.GetProvisionInfo(beam_provision_api_pb2.GetProvisionInfoRequest(),
                                     metadata=[("worker_id", args.id)]).info
    work = Path(tempfile.mkdtemp(prefix=f"beam-boot-{args.id}-", dir=os.environ.get("BOOT_DIR")))
    staged, site = work / "staged", work / "site"
    staged.mkdir()

    retrieval = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(grpc.insecure_channel(args.artifact_endpoint))
    names = []
    for dep in info.dependencies:
        if dep.role_urn != common_urns.artifact_roles.STAGING_TO.urn:
            continue
        name = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload).staged_name
        with open(staged / name, "wb") as out:
            for chunk in retrieval.GetArtifact(beam_artifact_api_pb2.GetArtifactRequest(artifact=dep),
                                               metadata=[("worker_id", args.id)]):
                out.write(chunk.data)
        names.append(name)

    listed = staged / "extra_packages.txt"
    packages = [staged / line.strip() for line in listed.read_text().splitlines() if line.strip()] \
        if listed.exists() else []
    if packages:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--disable-pip-version-check", "--target", str(site), *map(str, packages)], check=True)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if packages:
        env["PYTHONPATH"] = str(site)
    found = subprocess.run([sys.executable, "-c", "import wirepipe; print(wirepipe.__file__)"], env=env,
                           capture_output=True, text=True).stdout.strip()
    if "BOOT_LOG" in os.environ:
        with open(os.environ["BOOT_LOG"], "a") as log:
            log.write(json.dumps({"worker": args.id, "staged": sorted(names), "wirepipe": found,
                                  "site": str(site)}) + "\n")

    env.update(
        WORKER_ID=args.id,
        PIPELINE_OPTIONS=json_format.MessageToJson(info.pipeline_options),
        SEMI_PERSISTENT_DIRECTORY=str(work),
        CONTROL_API_SERVICE_DESCRIPTOR=text_format.MessageToString(
            endpoints_pb2.ApiServiceDescriptor(url=args.control_endpoint)),
        LOGGING_API_SERVICE_DESCRIPTOR=text_format.MessageToString(
            endpoints_pb2.ApiServiceDescriptor(url=args.logging_endpoint)),
    )
    os.execve(sys.executable, [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"], env)


if __name__ == "__main__":
    main()
