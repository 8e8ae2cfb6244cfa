"""A fake SLURM at the subprocess boundary: ``sbatch``, ``sacct``, ``squeue``, ``scontrol``,
``sinfo``, ``scancel`` and ``srun`` on ``PATH`` as one small script that keeps the cluster in a
JSON file. Jobs never run: a test says how each one ended (:meth:`FakeSlurm.end`) and writes
its ranks' logs itself. Every ffjobs code path above the commands is the real one; the same
paths run against the real mini-cluster in tests/integration.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

COMMANDS = ("sbatch", "sacct", "squeue", "scontrol", "sinfo", "scancel", "srun")
NODES = ("node1", "node2", "node3")

SCRIPT = r"""
import json, os, re, sys
from pathlib import Path

state_path = Path(os.environ["FAKE_SLURM_STATE"])
state = json.loads(state_path.read_text())
command, args = Path(sys.argv[0]).name, sys.argv[1:]
state.setdefault("calls", []).append([command, *args])


def option(name, default=None):
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def field(job_id, job, name):
    return {
        "JobID": job_id, "State": job["state"], "ExitCode": job["exit"],
        "NodeList": ",".join(job["nodes"]) or "None assigned", "Elapsed": "00:00:05",
        "NNodes": str(max(1, len(job["nodes"]))), "Start": "2026-12-04T10:00:00",
        "End": "2026-12-04T10:00:05" if job["state"] not in ("PENDING", "RUNNING") else "Unknown",
        "Comment": job["comment"], "JobName": job["name"],
    }[name]


out, code = "", 0
jobs = state["jobs"]
if command == "sbatch":
    script = Path(args[-1]).read_text()
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script, re.M))
    job_id = str(state["next_id"])
    state["next_id"] += 1
    jobs[job_id] = {"state": "PENDING", "exit": "0:0", "nodes": [],
                    "name": directives.get("job-name", ""), "comment": directives.get("comment", ""),
                    "begin": directives.get("begin"), "exclude": directives.get("exclude"),
                    "held": "hold" in directives, "command": args[-1]}
    out = f"Submitted batch job {job_id}\n"
elif command == "sacct":
    fields = option("-o", option("--format", "JobID,State")).split(",")
    wanted = option("-j", "")
    ids = [j for j in wanted.split(",") if j] if wanted else list(jobs)
    name = option("--name")
    lines = []
    for job_id in ids:
        job = jobs.get(job_id)
        # a held job reaches accounting only once released (squeue knows it at once)
        if job is None or job.get("unaccounted") or job.get("held") or (name and job["name"] != name):
            continue
        lines.append("|".join(field(job_id, job, f) for f in fields))
    out = "".join(line + "\n" for line in lines)
elif command == "squeue" and option("--name"):
    live = ("PENDING", "RUNNING", "COMPLETING")
    out = "".join(f"{j}\n" for j, job in jobs.items()
                  if job["name"] == option("--name") and job["state"] in live)
elif command == "squeue":
    job_id = option("-j")
    job = jobs.get(job_id)
    if job is None or job["state"] not in ("PENDING", "RUNNING", "COMPLETING"):
        out, code = "slurm_load_jobs error: Invalid job id specified\n", 1
    else:
        out = f"{job_id}|{job['state']}|{','.join(job['nodes'])}\n"
elif command == "scontrol":
    job_id = args[-1]
    job = jobs.get(job_id)
    if job is None:
        out, code = "slurm_load_jobs error: Invalid job id specified\n", 1
    elif args[0] == "release":
        job["held"] = False
    else:
        reason = "JobHeldUser" if job.get("held") else "None"
        out = (f"JobId={job_id} JobState={job['state']} Reason={reason} Restarts=0 "
               f"NodeList={','.join(job['nodes'])} Command={job.get('command')}\n")
elif command == "sinfo":
    nodes = ["node1", "node2", "node3"]
    out = "".join((f"{n}|idle\n" if "%T" in " ".join(args) else f"{n}\n") for n in nodes)
elif command == "scancel":
    job = jobs.get(args[-1])
    if job is not None and job["state"] in ("PENDING", "RUNNING"):
        job["state"] = "CANCELLED by 0"
state_path.write_text(json.dumps(state))
sys.stdout.write(out) if code == 0 else sys.stderr.write(out)
sys.exit(code)
"""


class FakeSlurm:
    """The fake cluster in ``folder``; :meth:`env` puts its commands first on ``PATH``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.bin = self.folder / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.state_path = self.folder / "state.json"
        self.state_path.write_text(json.dumps({"next_id": 100, "jobs": {}, "calls": []}))
        main = self.bin / "fake_slurm.py"
        main.write_text(f"#!{sys.executable}\n{SCRIPT}")
        main.chmod(0o755)
        for command in COMMANDS:
            (self.bin / command).symlink_to(main)

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "FAKE_SLURM_STATE": str(self.state_path),
        }

    @property
    def state(self) -> dict:
        return json.loads(self.state_path.read_text())

    def jobs(self) -> dict[str, dict]:
        return self.state["jobs"]

    def calls(self, command: str) -> list[list[str]]:
        return [call for call in self.state["calls"] if call[0] == command]

    def end(self, job_id: str, state: str, exit_code: int = 0, nodes=("node1", "node2")) -> None:
        """Say how job ``job_id`` ended (``COMPLETED``, ``FAILED``, ...) on which nodes."""
        data = self.state
        job = data["jobs"][job_id]
        job.update(state=state, exit=f"{exit_code}:0", nodes=list(nodes))
        self.state_path.write_text(json.dumps(data))

    def forget(self, job_id: str) -> None:
        """Accounting has no record of the job (it lags, or lost it)."""
        data = self.state
        data["jobs"][job_id]["unaccounted"] = True
        self.state_path.write_text(json.dumps(data))

    def killed_right_after_sbatch(self, job_id: str, folder: Path, *, task_left: bool) -> None:
        """Leave ``job_id`` as a submitter killed the moment sbatch answered leaves it: held,
        its script and pickled task (unless not ``task_left``) where submitit wrote them first,
        beside the job's folder pattern ``folder`` (``.../attempt-<n>/%j``)."""
        from submitit.core.utils import JobPaths

        paths = JobPaths(folder, job_id)
        script = Path(self.jobs()[job_id]["command"])
        script.unlink()  # submitit's symlink to the moved script: the script goes back
        paths.submission_file.rename(script)
        if task_left:
            paths.submitted_pickle.rename(script.parent / "0123abcd.pkl")
        else:
            paths.submitted_pickle.unlink()
        data = self.state
        data["jobs"][job_id]["held"] = True
        self.state_path.write_text(json.dumps(data))
