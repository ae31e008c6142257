"""Drives the RunPod simulator with the official runpod SDK (runpod-python), one step per run.

The C++ test (sdk_test.cc) starts the simulator, points RUNPOD_API_BASE_URL at it (the SDK posts
to f"{RUNPOD_API_BASE_URL}/graphql", runpod/api/graphql.py) and runs:
  sdk_flow.py gpus                 runpod.get_gpus() and runpod.get_gpu(<RTX 4090>)
  sdk_flow.py create               runpod.create_pod(...)
  sdk_flow.py get <pod id>         runpod.get_pod(id)
  sdk_flow.py list                 runpod.get_pods()
  sdk_flow.py terminate <pod id>   runpod.terminate_pod(id)
Each step prints what the SDK returned as one JSON document on stdout; the C++ test checks it
and the simulator's state between steps. SDK errors propagate (non-zero exit, traceback on stderr).
"""
import json
import os
import sys

import runpod

runpod.api_key = os.environ["RUNPOD_API_KEY"]
GPU = "NVIDIA GeForce RTX 4090"


def main(argv):
    step = argv[1]
    if step == "gpus":
        out = {"gpus": runpod.get_gpus(), "gpu": runpod.get_gpu(GPU)}
    elif step == "create":
        out = runpod.create_pod(
            name="sdk-pod",
            image_name="runpod/pytorch:2.1.0-py3.10-cuda11.8.0-devel-ubuntu22.04",
            gpu_type_id=GPU,
            cloud_type="ALL",
            ports="22/tcp",
            env={"HELLO": "world"},
        )
    elif step == "get":
        out = runpod.get_pod(argv[2])
    elif step == "list":
        out = runpod.get_pods()
    elif step == "terminate":
        runpod.terminate_pod(argv[2])
        out = {"terminated": argv[2]}
    else:
        raise SystemExit("unknown step " + step)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
