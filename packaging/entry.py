"""The frozen server's entry point (`bin/appliance` in the package).

Frozen, `sys.executable` is this program, so it must answer the two ways vLLM starts children of itself:
multiprocessing's spawned engine core and worker (`--multiprocessing-fork`, handled by freeze_support) and the
model-registry probe run as `[sys.executable, "-m", "vllm.model_executor.models.registry"]`. Nothing heavy is
imported before those are dispatched, and nothing at module level: the spawned processes re-import this module.
"""
import multiprocessing
import sys

REGISTRY_PROBE = ["-m", "vllm.model_executor.models.registry"]


def run() -> None:
    multiprocessing.freeze_support()
    if sys.argv[1:3] == REGISTRY_PROBE:
        from vllm.model_executor.models.registry import _run

        _run()
        return
    from appliance.cli import main

    main()


if __name__ == "__main__":
    run()
