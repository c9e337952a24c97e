"""The pre-registration record of every published claim, derived from git history: the published sweeps ran
before `preregistration.json` existed, so each record takes the declaration's first commit as frozen, with
the jobs finished then read from the results commit of its sweep, and each later version as an observation.

Run from the repository root: `python docs/results/derive_preregistration.py` (rewrites
docs/results/<sweep>/preregistration.json; then re-render the reports and `xformer claims table`).
C13's counts come from the audit of issue 50 (its sweep started about when it was declared; the decisive
part was rewritten after about 110-140 of its 165 jobs had finished)."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, ".")
from xformer.jobs import preregister as P
from xformer.report.rules.engine import project_claims

SWEEPS = {c.name: list(c.sweeps) for c in project_claims()}


def git(*a):
    return subprocess.run(["git", *a], capture_output=True, text=True, check=True).stdout


for claim, sweeps in SWEEPS.items():
    f = f"claims/{claim}.yaml"
    commits = git("log", "--reverse", "--format=%h %ad", "--date=iso", "--", f).split("\n")
    versions = []
    for line in filter(None, commits):
        h, date = line.split(" ", 1)
        body = yaml.safe_load(git("show", f"{h}:{f}"))[claim]
        versions.append((h, date[:16], body))
    cur = yaml.safe_load(Path(f).read_text())[claim]
    versions.append(("working tree", "2026-12-07", cur))
    for sweep in sweeps:
        folder = Path("docs/results") / sweep
        n = len(json.loads((folder / "jobs.json").read_text())["jobs"])
        res = git("log", "-1", "--format=%h %ad", "--date=iso", "--", str(folder / "seeds.csv")).split()
        res_commit, res_date = res[0], " ".join(res[1:3])[:16]
        out = []
        for h, date, body in versions:
            if claim == "C13" and h == "87901fd":
                done = None
            elif claim == "C13" and h == "be2dac7":
                done = 110
            else:
                done = n if (date >= res_date or claim != "C13") else None
            out.append((h, body, done))
        if claim == "C13":
            note = (
                "derived from git: the 165-job sweep's config was final at b7ca1c0 (2026-12-03 10:19) and C13 was "
                "first declared at 87901fd (10:28), jobs finished then not recorded; be2dac7 (11:44) replaced the "
                "decisive part 'attention flat, at most ×2 from k = 8 to 256' by '×2 beyond attention, k = 8 → 24' "
                "after about 110–140 of 165 jobs had finished (110 recorded, the lower end); fa46523 (12:26), the "
                "results commit, added 'stated before this sweep' to that part's margin source (165 of 165)"
            )
        else:
            note = (
                f"derived from git: the sweep's results were committed at {res_commit} ({res_date}); {claim} was "
                f"first declared as data at {versions[0][0]} ({versions[0][1]}), after all {n} jobs had finished"
            )
        P.derive(folder, claim, out, n, note)
        print(claim, sweep, P.status(P.read(folder), claim, cur))
