"""Two launches in the same second get their own Hydra job folder (``jobs/<second>_<pid>-<hex>``), with
the configs of ``ifdistill-train`` and ``ifdistill-eval``: each folder's ``.hydra/`` and log are its
launch's alone. The launches run Hydra's real ``main`` on the shipped config (``conf/hydra/default.yaml``)
around a task that only names its job folder: the programs' own start-up (torch, the model) adds seconds
and nothing to what is tested."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from ifdistill.runs.sweeps import LAUNCH_ID_ENV

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = textwrap.dedent("""
    import sys
    import hydra
    from hydra.core.hydra_config import HydraConfig
    import ifdistill.conf  # registers ifdistill's resolvers

    @hydra.main(version_base="1.3", config_path="pkg://ifdistill.conf", config_name=sys.argv.pop(1))
    def main(cfg):
        print(HydraConfig.get().runtime.output_dir)

    main()
""")


@pytest.mark.parametrize("config", ["train", "eval"])
def test_two_launches_at_once_never_share_a_job_folder(tmp_path, config):
    t0 = time.time()
    # two separate launches: neither inherits a launch id that this test process may hold (a config it
    # resolved in process sets one, which the processes a launch starts share by design)
    env = {k: v for k, v in os.environ.items() if k != LAUNCH_ID_ENV}
    procs = [subprocess.Popen([sys.executable, "-c", LAUNCH, config, f"paths.output_root={tmp_path}", f"+launch={i}"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    folders = [Path(o[0].strip()) for o in outs]
    jobs = sorted((tmp_path / config / "jobs").iterdir())
    assert sorted(folders) == jobs and len(jobs) == 2
    for i, (proc, job) in enumerate(zip(procs, folders)):
        m = re.fullmatch(r"(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)_(\d+)-[0-9a-f]{4}", job.name)
        assert m is not None and int(m[2]) == proc.pid, job.name  # named by the process that launched it
        assert f"+launch={i}" in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
    print(f"job folders {[j.name for j in folders]} ({time.time() - t0:.1f} s)")
