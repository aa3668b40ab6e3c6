"""The container recipe and the Kubernetes manifest: they parse, and what they run is a valid pool."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.cli import invoke
from wirepipe.core.units import parse_duration
from wirepipe.core.workers import Worker
from wirepipe.pipelines.config import build_pipeline, read_config, validate_config
from wirepipe.pipelines.pool import pool_config, resolve_workers

ROOT = Path(__file__).parent.parent


def test_the_k8s_manifest_runs_a_valid_worker_pool(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s-worker.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Deployment"}
    deployment = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["wirepipe"]
    args = container["args"]
    assert args[0] == "run" and args[2:4] == ["--workers", "2"]
    mount = next(m for m in container["volumeMounts"] if args[1].startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config_map = kinds["ConfigMap"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    pipeline = tmp_path / Path(args[1]).name
    pipeline.write_text(config_map["data"][Path(args[1]).name])

    env = {e["name"]: e["value"] for e in container["env"]}
    env["HOSTNAME"] = "points-archive-abc12"
    data = read_config(pipeline, env=env)
    cfg = validate_config(data, file=str(pipeline))
    workers = resolve_workers(args[3])
    shared = pool_config(data, workers, file=str(pipeline))  # refuses bounded sources, an ordered consumer
    assert shared["source"]["durable"] == "points-archive"
    assert len(cfg.source.url) == 3  # the URL list
    paths = {build_pipeline(validate_config(shared), worker=Worker(i, workers)).sink.config.path for i in range(workers)}
    assert len(paths) == workers  # distinct part names per worker
    assert pod["terminationGracePeriodSeconds"] > parse_duration(data["shutdown_timeout"])
    prometheus = cfg.monitor.prometheus
    assert container["ports"][0]["containerPort"] == prometheus.port
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(prometheus.port)
    assert container["resources"]["requests"]["cpu"] == str(workers)  # one core per worker process
    res = invoke("validate", str(pipeline), env={**env})
    assert res.returncode == 0, res.stderr


def test_the_dockerfile_installs_the_package_and_runs_the_cli() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (\S+)", text, flags=re.M):
        assert (ROOT / source).exists(), source
    assert re.search(r"^RUN pip install \.", text, flags=re.M)
    assert 'ENTRYPOINT ["wirepipe"]' in text
    assert re.search(r"^USER \d+", text, flags=re.M)  # not root
